"""The microVM tier through warrend's API (TCG here): the same create, run
and kill as the container tier with tier="microvm". One VM per test: boots
take seconds."""
import os
import time

import pytest


def guest(build):
    g = build / "tests" / "guest"
    k, i = g / "vmlinux", g / "initramfs.cpio"
    if not (k.exists() and i.exists()):
        pytest.fail(f"the guest is not built ({g}); ninja builds it with the tests")
    return {"kernel": str(k), "initrd": str(i)}


def test_microvm_create_run_kill(fresh_daemon, build):
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "memory_mb": 256, "disk_mb": 64, "timeout": 300,
                                     "env": {"WHO": "vm"}})
        assert r.status == 201, r
        sid = r.json()["id"]
        got = c.get(f"/v1/sandboxes/{sid}").json()
        assert got["tier"] == "microvm" and got["state"] == "running", got
        out = c.run(sid, ["sh", "-c", "echo $WHO; hostname; uname -r; exit 4"])
        assert out["exit_code"] == 4, out
        lines = out["stdout"].splitlines()
        assert lines[0] == "vm" and lines[1] == sid, out
        # its own kernel, not the host's
        assert lines[2] != os.uname().release, out
        # state persists between commands
        c.run(sid, ["sh", "-c", "echo kept > /data"])
        assert c.run(sid, ["cat", "/data"])["stdout"] == "kept\n"
        # what the tier does not offer yet says so
        r = c.get(f"/v1/sandboxes/{sid}/files?path=/data")
        assert r.status == 501 and r.error[0] == "not_implemented", r
        # a timeout is enforced
        t = c.run(sid, ["sleep", "100"], timeout=1)
        assert t["reason"] == "timeout", t
        qemu = [p for p in os.listdir("/proc") if p.isdigit()
                and open(f"/proc/{p}/cmdline", "rb").read().find(sid.encode()) >= 0]
        assert qemu, "no QEMU process names the sandbox"
        c.kill(sid)
        # destroy follows the answer: QEMU reaped, the VM's files removed
        for _ in range(100):
            if not any(os.path.exists(f"/proc/{p}") for p in qemu) and \
                    not (d.run / "microvm" / sid).exists():
                break
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{p}") for p in qemu), "QEMU outlived the kill"
        assert not (d.run / "microvm" / sid).exists()
    finally:
        c.close()


def test_microvm_bad_requests(fresh_daemon, build, warrend):
    # a node without a guest kernel has no microvm tier
    c = warrend.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs"})
        assert r.status == 400 and r.error == ("invalid_argument", "tier"), r
    finally:
        c.close()
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        # a directory image cannot be a VM's disk
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox"})
        assert r.status == 400 and r.error[1] == "image", r
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "layers": ["busybox-erofs"]})
        assert r.status == 400 and r.error[1] == "layers", r
    finally:
        c.close()
