"""Fixtures for the integration suite: a built tree, test images with the
probe inside, and an isolated warren state (own state dir, run dir and
cgroup base) that is checked for leftovers after every test."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("WARREN_BUILD", ROOT / "build-test"))


def own_cgroup_dirs(base):
    """Every directory named `base` under this process's cgroup, per hierarchy."""
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            mount = Path("/sys/fs/cgroup/unified")
            if not (mount / "cgroup.procs").exists():
                mount = Path("/sys/fs/cgroup")
        elif ctrls.startswith("name="):
            continue
        else:
            mount = Path("/sys/fs/cgroup") / ctrls
        d = mount / path.lstrip("/") / base
        dirs.append(d)
    return dirs


@pytest.fixture(scope="session")
def build():
    for f in ("warren", "warren-init", "tests/wr-probe"):
        assert (BUILD / f).exists(), f"{BUILD / f} missing: run ninja first"
    return BUILD


@pytest.fixture(scope="session")
def images(build, tmp_path_factory):
    out = Path(os.environ.get("WARREN_TEST_IMAGES", build / "test-images"))
    subprocess.run(
        [str(ROOT / "scripts/mkimage.sh"), str(out),
         "--add", f"{build / 'tests/wr-probe'}:/usr/bin/wr-probe"],
        check=True, stdout=subprocess.DEVNULL)
    return {"dir": str(out / "busybox"), "erofs": str(out / "busybox.erofs")}


class Warren:
    def __init__(self, build, env, images):
        self.build = build
        self.env = env
        self.images = images

    def run(self, *args, image=None, timeout=120, input=None, check=None):
        img = image or self.images["dir"]
        argv = [str(self.build / "warren"), "run", "--image", img, *args]
        p = subprocess.run(argv, env=self.env, capture_output=True, timeout=timeout,
                           input=input)
        p.out = p.stdout.decode(errors="replace")
        p.err = p.stderr.decode(errors="replace")
        if check is not None:
            assert p.returncode == check, (p.returncode, p.out, p.err)
        return p

    def probe(self, *args, opts=(), **kw):
        return self.run(*opts, "--", "wr-probe", *args, **kw)

    def cli(self, *args, timeout=60):
        p = subprocess.run([str(self.build / "warren"), *args], env=self.env,
                           capture_output=True, timeout=timeout)
        p.out = p.stdout.decode(errors="replace")
        p.err = p.stderr.decode(errors="replace")
        return p


def leftovers(state, cg_base):
    found = []
    idmap = state / "idmap"
    if idmap.exists():
        found += [f"uid range {p.name}" for p in idmap.iterdir()]
    for d in own_cgroup_dirs(cg_base):
        if d.exists():
            found += [f"cgroup {c}" for c in d.iterdir() if c.is_dir()]
    return found


@pytest.fixture
def warren(build, images, tmp_path):
    state = tmp_path / "state"
    run = tmp_path / "run"
    cg_base = f"warren-it-{os.getpid()}"
    env = dict(os.environ)
    env.update(WARREN_STATE_DIR=str(state), WARREN_RUN_DIR=str(run),
               WARREN_CGROUP_BASE=cg_base,
               ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    w = Warren(build, env, images)
    yield w
    # Every test must leave no cgroup, uid range or process behind.
    deadline = time.time() + 5
    while leftovers(state, cg_base) and time.time() < deadline:
        time.sleep(0.05)
    left = leftovers(state, cg_base)
    for d in own_cgroup_dirs(cg_base):
        subprocess.run(["sh", "-c", f"find {d} -depth -type d -exec rmdir {{}} + 2>/dev/null"],
                       check=False)
    assert not left, f"left behind: {left}"


def errno_of(text):
    m = re.search(r"errno=(\w+)", text)
    return m.group(1) if m else None
