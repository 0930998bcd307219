"""One daemon and one sandbox per tier for a whole test module, so that the
same file, PTY and streaming tests run on the container, microvm and vm
tiers with few VM boots (TCG boots are slow: a VM is shared by the module's
tests, each test working under paths of its own).

    from vmtiers import tier_fixtures
    api, sandbox, tier = tier_fixtures(["container", "microvm", "vm"])
"""
import os

import pytest

from conftest import Client, Daemon


def guest(build):
    g = build / "tests" / "guest"
    k, i = g / "vmlinux", g / "initramfs.cpio"
    if not (k.exists() and i.exists()):
        pytest.fail(f"the guest is not built ({g}); ninja builds it with the tests")
    return {"kernel": str(k), "initrd": str(i)}


def vm_image(build):
    img = build / "tests" / "vm" / "debian-vm.raw"
    if not img.exists():
        pytest.fail(f"the VM disk is not built ({img}); ninja builds it with the tests")
    return img


class Tier:
    def __init__(self, name, daemon, own, image, spec):
        self.name, self.d, self.own, self.image, self.spec = name, daemon, own, image, spec
        self.shared = None

    @property
    def vm(self):
        return self.name != "container"

    def create(self, api, **kw):
        spec = dict(self.spec, **kw)
        spec.setdefault("image", self.image)
        if self.vm:
            spec["tier"] = self.name
        return api.create(**spec)


def start_tier(name, build, tmp, warrend):
    if name == "container":
        return Tier(name, warrend, False, "busybox", {})
    if name == "microvm":
        d = Daemon(build, tmp, f"mv{os.getpid()}", extra={"microvm": guest(build)}).start()
        return Tier(name, d, True, "busybox-erofs", {"memory_mb": 256, "disk_mb": 128})
    d = Daemon(build, tmp, f"vm{os.getpid()}",
               extra={"vm": {"accel": "tcg", "boot_timeout": 600, "shutdown_timeout": 60},
                      "images": {"debian-vm": str(vm_image(build))}}).start()
    return Tier(name, d, True, "debian-vm", {"memory_mb": 512, "timeout": 1800})


def tier_fixtures(names):
    @pytest.fixture(scope="module", params=names)
    def tier(request, build, tmp_path_factory, warrend):
        t = start_tier(request.param, build, tmp_path_factory.mktemp(request.param), warrend)
        yield t
        if t.own:
            problems = t.d.finish()
            assert not problems, "\n".join(problems) + "\n" + t.d.log_text()

    @pytest.fixture
    def api(tier):
        # a vm tier's create is a whole OS boot under TCG: minutes on a
        # loaded machine
        c = Client(tier.d, timeout=900) if tier.vm else tier.d.client()
        yield c
        c.close()

    @pytest.fixture
    def sandbox(api, tier):
        """The container tier: a sandbox per test; a VM tier: one VM for
        the module (created by the first test that asks)."""
        if not tier.vm:
            sid = tier.create(api)
            yield sid
            api.kill(sid)
            return
        if tier.shared is None:
            tier.shared = tier.create(api)
        yield tier.shared

    return api, sandbox, tier
