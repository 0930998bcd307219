"""Helpers of the lifecycle tests: states, a counter process, and looking at
a sandbox from the host without going through the API (which would resume
it)."""
import time
from pathlib import Path

from conftest import own_cgroup_dirs

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done"


def state(c, sid):
    return c.get(f"/v1/sandboxes/{sid}").json()["state"]


def wait_state(c, sid, want, limit=15):
    deadline = time.time() + limit
    st = None
    while time.time() < deadline:
        st = state(c, sid)
        if st == want:
            return time.time()
        time.sleep(0.05)
    raise AssertionError(f"{sid} not {want} after {limit}s (is {st})")


def events(c, sid):
    return c.get(f"/v1/sandboxes/{sid}/events").json()["events"]


def init_pid(sid):
    """Host pid of the sandbox's PID 1 (warren-init in its cgroup)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cg = (p / "cgroup").read_text()
            comm = (p / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "warren-init" and (f"/{sid}\n" in cg or f"/{sid}/init\n" in cg):
            return int(p.name)
    raise AssertionError(f"PID 1 of {sid} not found")


def peek(sid, path, pid=None):
    """A file inside the sandbox, read from the host (no API call)."""
    pid = pid or init_pid(sid)
    return (Path(f"/proc/{pid}/root") / path.lstrip("/")).read_text()


def count(sid, pid=None):
    for _ in range(50):
        try:
            s = peek(sid, "/tmp/count", pid).strip()
            if s:
                return int(s)
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError("no counter in the sandbox")


def start_counter(c, sid):
    r = c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": COUNTER, "background": True})
    assert r.status == 201, r
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            if count(sid) > 0:
                return r.json()["id"]
        except AssertionError:
            pass
    raise AssertionError("the counter did not start")


def unified_dir(daemon, sid):
    """The sandbox's cgroup in the hierarchy that freezes it (unified on a
    hybrid host, the v2 hierarchy on a pure one)."""
    for d in own_cgroup_dirs(daemon.cg_base):
        if (d / sid / "cgroup.freeze").exists():
            return d / sid
    raise AssertionError("no cgroup.freeze for the sandbox")


def frozen(daemon, sid):
    return (unified_dir(daemon, sid) / "cgroup.freeze").read_text().strip() == "1"


def pause(c, sid, expect=200, **body):
    r = c.post(f"/v1/sandboxes/{sid}/pause", body or None)
    assert r.status == expect, r
    return r.json()


def resume(c, sid, expect=200, **body):
    r = c.post(f"/v1/sandboxes/{sid}/resume", body or None)
    assert r.status == expect, r
    return r.json()


def soft_limit(daemon, sid):
    """v1 memory.soft_limit_in_bytes of the sandbox (None without v1 memory)."""
    for d in own_cgroup_dirs(daemon.cg_base):
        f = d / sid / "memory.soft_limit_in_bytes"
        if f.exists():
            return int(f.read_text())
    return None
