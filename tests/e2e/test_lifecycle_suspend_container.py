"""A container paused with keep_memory=false: its processes are
checkpointed to disk with CRIU and end (their memory is freed); resume
restores them into the same sandbox, which goes on where it was
(tiers/container_ckpt.c, docs/API-LIFECYCLE.md "Checkpoint with CRIU").

The workload is a REPL-like process: a shell that reads statements from a
FIFO, evaluates them, and keeps its state (variables, 48 MiB of data) in
memory only; it runs as an orphan of a finished command, so it is a child
of PID 1 inside the commands' Landlock domain, as an agent's interpreter
would be.
"""
import os
import time
from pathlib import Path

import pytest

from lifecycle_util import events, frozen, pause, resume, state, wait_state

from test_lifecycle_checkpoint import built_criu

REPL = r"""
mkfifo /tmp/in
cat > /tmp/repl.sh <<'EOF'
exec 3<>/tmp/in
x=0
big=$(head -c 50331648 /dev/zero | tr '\0' x)
n=0
echo ready > /tmp/out
while read -r line <&3; do
  n=$((n+1))
  eval "$line" > /tmp/out.tmp 2>&1
  mv /tmp/out.tmp /tmp/out
done
EOF
sh /tmp/repl.sh >/dev/null 2>&1 </dev/null &
i=0; while [ "$(cat /tmp/out 2>/dev/null)" != ready ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
cat /tmp/out
"""


def repl(c, sid, stmt):
    """One statement to the REPL; its output."""
    out = c.run(sid, ["sh", "-c",
                      "rm -f /tmp/out; echo \"$1\" > /tmp/in; i=0; "
                      "while [ ! -e /tmp/out ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
                      "cat /tmp/out", "repl", stmt])
    assert out["exit_code"] == 0, out
    return out["stdout"]


def procs_of(daemon, sid):
    """Host pids in the sandbox's cgroup (any hierarchy, any depth)."""
    from conftest import own_cgroup_dirs
    pids = set()
    for d in own_cgroup_dirs(daemon.cg_base):
        base = d / sid
        if base.is_dir():
            for f in base.rglob("cgroup.procs"):
                pids |= {int(p) for p in f.read_text().split()}
    return pids


def memory_bytes(c, sid):
    return c.get(f"/v1/sandboxes/{sid}").json()["usage"]["memory_bytes"]


def ckpt_paths(daemon, sid):
    return [daemon.state / "ckpt" / sid, daemon.run / "ckpt" / sid]


def gone_soon(paths, limit=10):
    """The sandbox's end is answered before its resources are released:
    wait for paths to go."""
    deadline = time.time() + limit
    while time.time() < deadline and any(p.exists() for p in paths):
        time.sleep(0.05)
    return not any(p.exists() for p in paths)


def mounted_under(path):
    return [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines()
            if f" {path}" in ln]


@pytest.fixture
def criu():
    return built_criu()


def test_pause_to_disk_keeps_a_repl_and_frees_its_memory(criu, api, warrend):
    sid = api.create(memory_mb=256)
    api.run(sid, ["sh", "-c", "echo kept > /tmp/file; echo shm > /dev/shm/seg"])
    assert api.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(api, sid, "x=$((x+21)); echo $x ${#big}") == "21 50331648\n"
    # the REPL is in the commands' Landlock domain: PID 1 is outside it
    assert "refused" in repl(api, sid, "kill -0 1 2>/dev/null && echo reached || echo refused")
    before = memory_bytes(api, sid)
    assert before > 48 << 20, before

    r = pause(api, sid, keep_memory=False)
    assert r["state"] == "paused", r
    ev = [e for e in events(api, sid) if e["type"] == "paused"][-1]
    assert ev["detail"]["keep_memory"] is False and ev["detail"]["save_s"] > 0, ev
    # no process left; the memory is given back
    assert procs_of(warrend, sid) == set()
    after = memory_bytes(api, sid)
    assert after < before - (40 << 20), (before, after)
    assert all(p.exists() for p in ckpt_paths(warrend, sid))
    assert frozen(warrend, sid)
    # a read of the sandbox does not resume it
    assert state(api, sid) == "paused"

    r = resume(api, sid)
    assert r["state"] == "running", r
    assert [e for e in events(api, sid) if e["type"] == "restored"]
    # the REPL goes on with its state, in its domain, with its data
    assert repl(api, sid, "x=$((x*2)); echo $x ${#big} $n") == "42 50331648 3\n"
    assert "refused" in repl(api, sid, "kill -0 1 2>/dev/null && echo reached || echo refused")
    # files, /dev/shm, and what every command gets (seccomp, no_new_privs)
    out = api.run(sid, ["sh", "-c", "cat /tmp/file /dev/shm/seg; "
                        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"])
    assert out["stdout"] == "kept\nshm\nNoNewPrivs:\t1\nSeccomp:\t2\n", out
    # the masks are read-only mounts still
    out = api.run(sid, ["sh", "-c", "touch /sys/firmware/x 2>&1; "
                        "awk '$4 ~ /^\\/devfs\\/mask/ && $6 !~ /^ro/' /proc/self/mountinfo"])
    assert "Read-only file system" in out["stdout"], out
    assert "devfs" not in out["stdout"], out
    # the checkpoint is gone, and of the mounts that kept the file system
    # only the writable layer's two (the source of a next checkpoint)
    images, pins = ckpt_paths(warrend, sid)
    assert not images.exists()
    assert sorted(p.name for p in pins.iterdir()) == ["devfs", "upper"]
    assert len(mounted_under(pins)) == 2, mounted_under(pins)
    assert api.kill(sid).status == 204
    assert gone_soon([pins])
    assert not mounted_under(warrend.run / "ckpt")


def test_exec_resumes_from_disk_and_kill_of_a_suspended_sandbox(criu, api, warrend):
    a = api.create()
    b = api.create()
    for sid in (a, b):
        assert api.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
        assert repl(api, sid, "x=7; echo $x") == "7\n"
        pause(api, sid, keep_memory=False)
    # a command resumes it on the same request (auto-resume)
    assert repl(api, a, "echo $((x+1))") == "8\n"
    assert state(api, a) == "running"
    # killed while on disk: nothing of it is left
    assert api.kill(b).status == 204
    assert state(api, b) == "killed"
    assert gone_soon(ckpt_paths(warrend, b))
    assert not mounted_under(warrend.run / "ckpt" / b)
    # a second round trip of the same sandbox
    pause(api, a, keep_memory=False)
    pause(api, a, keep_memory=False)  # on disk already: no-op
    assert repl(api, a, "echo $((x+2))") == "9\n"
    assert api.kill(a).status == 204


def test_pause_to_disk_refused_while_a_command_runs(criu, api):
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["sleep", "30"], "background": True})
    assert r.status == 201, r
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    assert r.status == 409, r
    assert "in flight" in r.json()["error"]["message"], r
    assert state(api, sid) == "running"
    assert api.kill(sid).status == 204
