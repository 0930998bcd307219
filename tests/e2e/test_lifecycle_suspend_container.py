"""A container paused with keep_memory=false: its processes are
checkpointed to disk with CRIU and end (their memory is freed); resume
restores them into the same sandbox, which goes on where it was
(tiers/container_ckpt.c, docs/API-LIFECYCLE.md "Checkpoint with CRIU").

The workloads are REPLs: a shell, and a Python interpreter
(code.InteractiveInterpreter, the python test image), each reading
statements from a FIFO, evaluating them, and keeping its state (variables,
48 MiB of data) in memory only; each runs as an orphan of a finished
command, so it is a child of PID 1 inside the commands' Landlock domain, as
an agent's interpreter would be.
"""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lifecycle_util import events, frozen, pause, resume, soft_limit, state, unified_dir

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


def repl(c, sid, stmt, fifo="/tmp/in", out="/tmp/out"):
    """One statement to a REPL reading fifo and answering in out; its
    output."""
    r = c.run(sid, ["sh", "-c",
                    "rm -f \"$3\"; echo \"$1\" > \"$2\"; i=0; "
                    "while [ ! -e \"$3\" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
                    "cat \"$3\"", "repl", stmt, fifo, out])
    assert r["exit_code"] == 0, r
    return r["stdout"]


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
    # a deleted file it still reads
    assert repl(api, sid, "echo gone > /tmp/del; exec 6</tmp/del; rm /tmp/del; echo ok") == \
        "ok\n"
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
    assert repl(api, sid, "x=$((x*2)); echo $x ${#big} $n") == "42 50331648 4\n"
    assert "refused" in repl(api, sid, "kill -0 1 2>/dev/null && echo reached || echo refused")
    # the deleted file still reads
    assert repl(api, sid, "cat <&6") == "gone\n"
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
    # running again: its memory is no longer the first reclaimed (v1)
    limit = soft_limit(warrend, a)
    assert limit is None or limit > 1 << 50, limit
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


def test_pause_to_disk_refused_with_an_established_connection(criu, api, warrend):
    """An established TCP connection cannot be restored into the sandbox's
    network namespace (API-LIFECYCLE.md): the pause to disk is refused
    (409, saying so), the sandbox runs on as it was; once the connection is
    closed, it pauses to disk."""
    sid = api.create()
    assert api.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    # started by the REPL, so that a later statement of it may end them (a
    # command signals only processes of its own Landlock domain)
    assert repl(api, sid, "echo one > /tmp/send; "
                "(sleep 100000 | nc -l -p 7001 > /tmp/recv 2>/dev/null &); sleep 0.3; "
                "(tail -f /tmp/send 2>/dev/null | nc 127.0.0.1 7001 >/dev/null 2>&1 &); "
                "i=0; while [ ! -s /tmp/recv ] && [ $i -lt 100 ]; do sleep 0.05; "
                "i=$((i+1)); done; cat /tmp/recv; netstat -tn | grep -c ESTABLISHED") == \
        "one\n2\n"
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    assert r.status == 409, r
    assert "established TCP connection" in r.json()["error"]["message"], r
    assert state(api, sid) == "running" and not frozen(warrend, sid)
    assert not (warrend.state / "ckpt" / sid).exists()
    # nothing of the failed first checkpoint stays, its mounts neither
    assert not (warrend.run / "ckpt" / sid).exists()
    assert not mounted_under(warrend.run / "ckpt" / sid)
    out = api.run(sid, ["sh", "-c", "echo two >> /tmp/send; sleep 1.5; cat /tmp/recv"])
    assert out["stdout"] == "one\ntwo\n", out  # the connection lives on
    assert repl(api, sid, "kill $(pidof nc tail sleep) 2>/dev/null; sleep 0.3; "
                "netstat -tn | grep -c ESTABLISHED") == "0\n"
    pause(api, sid, keep_memory=False)
    assert resume(api, sid)["state"] == "running"
    assert api.kill(sid).status == 204


def test_pause_to_disk_waits_for_a_call_about_to_end(criu, api, warrend):
    """A call that ends within the pause's short wait (here a command of
    0.5 s; in practice the harvest sampler's or a usage read's hold) does
    not refuse the pause to disk: it waits, then goes to disk."""
    import threading
    from conftest import Client
    sid = api.create()
    c2 = Client(warrend)
    t = threading.Thread(target=lambda: c2.run(sid, ["sleep", "0.5"]))
    t.start()
    try:
        time.sleep(0.2)  # the command runs
        r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200 and r.json()["state"] == "paused", r
    finally:
        t.join()
        c2.close()
    assert procs_of(warrend, sid) == set()
    assert api.kill(sid).status == 204


def test_pause_to_disk_refused_while_a_command_runs(criu, api):
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["sleep", "30"], "background": True})
    assert r.status == 201, r
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    assert r.status == 409, r
    assert "in flight" in r.json()["error"]["message"], r
    assert state(api, sid) == "running"
    assert api.kill(sid).status == 204


def cg_procs_write(daemon, sid, pid):
    """Put pid in the sandbox's cgroup in every hierarchy (as a restore's
    processes are)."""
    from conftest import own_cgroup_dirs
    for d in own_cgroup_dirs(daemon.cg_base):
        f = d / sid / "cgroup.procs"
        if f.exists():
            f.write_text(str(pid))


def test_restart_while_suspended(criu, fresh_daemon):
    """warrend killed (-9) while a sandbox is on disk: the next start finds
    its checkpoint and the mounts that kept its file system, and an exec
    restores it with its state."""
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    c.run(sid, ["sh", "-c", "echo kept > /tmp/file"])
    assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(c, sid, "x=5; echo $x") == "5\n"
    pause(c, sid, keep_memory=False)
    c.close()
    d.kill9()
    d.start()
    c = d.client()
    sb = c.get(f"/v1/sandboxes/{sid}").json()
    assert sb["state"] == "paused", sb
    assert procs_of(d, sid) == set()
    assert repl(c, sid, "echo $((x*3)); cat /tmp/file") == "15\nkept\n"
    assert c.kill(sid).status == 204
    assert gone_soon(ckpt_paths(d, sid))
    c.close()


def test_crash_mid_pause_to_disk(criu, fresh_daemon):
    """A crash after the dump, before the record: the record says running,
    the tree is frozen, a checkpoint and its mounts are there. The next
    start thaws the tree, which goes on, and drops the checkpoint."""
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(c, sid, "x=11; echo $x") == "11\n"
    c.close()
    d.kill9()
    (unified_dir(d, sid) / "cgroup.freeze").write_text("1")
    images = d.state / "ckpt" / sid
    pin = d.run / "ckpt" / sid / "root"
    images.mkdir(parents=True)
    (images / "warren.json").write_text("{}")
    pin.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "pin", str(pin)], check=True)
    try:
        d.start()
        c = d.client()
        assert state(c, sid) == "running" and not frozen(d, sid)
        assert repl(c, sid, "echo $((x+1))") == "12\n"
        assert not images.exists()
        assert not mounted_under(pin)
        assert c.kill(sid).status == 204
        c.close()
    finally:
        subprocess.run(["umount", "-l", str(pin)], capture_output=True)


def test_crash_mid_restore(criu, fresh_daemon):
    """A crash in a restore before its commit: the record says suspended,
    and what the restore made (processes in the sandbox's cgroup) is there.
    The next start kills them, keeps the checkpoint, and the sandbox
    resumes from it."""
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(c, sid, "x=3; echo $x") == "3\n"
    pause(c, sid, keep_memory=False)
    c.close()
    d.kill9()
    left = subprocess.Popen(["sleep", "1000"])
    try:
        cg_procs_write(d, sid, left.pid)
        d.start()
        assert left.wait(timeout=10) == -signal.SIGKILL
        c = d.client()
        assert state(c, sid) == "paused"
        assert (d.state / "ckpt" / sid / "warren.json").exists()
        assert repl(c, sid, "echo $((x+4))") == "7\n"
        assert c.kill(sid).status == 204
        c.close()
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


def test_crash_after_restore_committed(criu, fresh_daemon):
    """A crash after a resume's commit, before its last step: the record
    says running, the restored tasks are still stopped (criu restore
    --leave-stopped) and the checkpoint is there. The next start lets them
    continue and drops the checkpoint."""
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(c, sid, "x=20; echo $x") == "20\n"
    pause(c, sid, keep_memory=False)
    resume(c, sid)
    c.close()
    d.kill9()
    pids = procs_of(d, sid)
    assert len(pids) >= 2, pids  # PID 1 and the REPL
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    images = d.state / "ckpt" / sid
    images.mkdir(parents=True)
    (images / "warren.json").write_text("{}")
    d.start()
    c = d.client()
    assert state(c, sid) == "running"
    assert repl(c, sid, "echo $((x+1))") == "21\n"
    assert not images.exists()
    assert c.kill(sid).status == 204
    c.close()


def test_restored_sandbox_keeps_proc_while_idle(criu, fresh_daemon):
    """Restored from disk, an idle sandbox keeps its /proc and devpts (an
    idle one that was never checkpointed gives them back: the masks of a
    /proc mounted again would come from a source a restored sandbox no
    longer has in a form its processes may clone); its commands find them,
    masked, and it pauses to disk again."""
    from test_sandbox_mounts import FAST_IDLE, PROC_PTS, mounts, wait_harvest
    d = fresh_daemon(extra=FAST_IDLE).start()
    c = d.client()
    sid = c.create()
    try:
        assert c.run(sid, ["true"])["exit_code"] == 0
        pause(c, sid, keep_memory=False)
        resume(c, sid)
        wait_harvest(c, sid, "idle")
        time.sleep(1)
        m = mounts(d, sid)
        assert "/proc" in m and "/dev/pts" in m and "/proc/keys" in m, sorted(m)
        r = c.run(sid, ["sh", "-c", "awk '" + PROC_PTS + "' /proc/self/mountinfo; "
                        "cat /proc/1/comm; ls -A /proc/acpi; test -c /dev/ptmx && echo pty"])
        assert r["exit_code"] == 0 and r["stdout"] == "2\nwarren-init\npty\n", r
        pause(c, sid, keep_memory=False)
        assert c.run(sid, ["cat", "/proc/1/comm"])["stdout"] == "warren-init\n"
    finally:
        c.kill(sid)
        c.close()


def test_snapshot_of_a_suspended_and_of_a_restored_sandbox(criu, api, warrend):
    """A snapshot reads the writable layer through its pin: of a sandbox on
    disk (it stays on disk) and of one restored from it."""
    from test_lifecycle_snapshot import imp
    base = f"ckptbase{os.getpid()}:1"
    imp(api, warrend, base)
    sid = api.create(image=base)
    api.run(sid, ["sh", "-c", "echo first > /tmp/f; rm /etc/hostname"])
    pause(api, sid, keep_memory=False)
    names = [f"ckpt/s{os.getpid()}:1", f"ckpt/s{os.getpid()}:2"]
    r = api.post(f"/v1/sandboxes/{sid}/snapshot", {"name": names[0]})
    assert r.status == 201, r
    assert state(api, sid) == "paused"
    assert procs_of_any(sid) == 0
    api.run(sid, ["sh", "-c", "echo second > /tmp/f"])  # restored
    r = api.post(f"/v1/sandboxes/{sid}/snapshot", {"name": names[1]})
    assert r.status == 201, r
    try:
        for name, want in zip(names, ("first", "second")):
            new = api.create(image=name)
            out = api.run(new, ["sh", "-c", "cat /tmp/f; test -e /etc/hostname || echo gone"])
            assert out["stdout"] == f"{want}\ngone\n", (name, out)
            api.kill(new)
    finally:
        api.kill(sid)


def procs_of_any(sid):
    """Processes of the sandbox (PID 1 found by its cgroup)."""
    from lifecycle_util import init_pid
    try:
        init_pid(sid)
        return 1
    except AssertionError:
        return 0


PYREPL = r"""
import code, contextlib, io, os
ns = {}
interp = code.InteractiveInterpreter(ns)
big = bytearray(48 << 20)
big[::4096] = b"x" * len(big[::4096])  # its pages are touched: resident
ns["big"] = big
open("/tmp/pout", "w").write("ready\n")
while True:
    with open("/tmp/pin") as fifo:
        for line in fifo:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                interp.runsource(line, symbol="single")
            with open("/tmp/pout.tmp", "w") as f:
                f.write(buf.getvalue())
            os.rename("/tmp/pout.tmp", "/tmp/pout")
"""


def py(c, sid, stmt):
    """One statement to the Python REPL; what it printed."""
    return repl(c, sid, stmt, "/tmp/pin", "/tmp/pout")


def test_python_repl_keeps_its_state_across_a_pause_to_disk(criu, api, warrend):
    """The issue's own case: a Python interpreter (code.InteractiveInterpreter,
    as a notebook kernel keeps one) with variables, a function, an import
    and 48 MiB of data, paused to disk and resumed: it answers from the same
    state, and the memory was freed meanwhile."""
    from test_functions import pyimage
    img = pyimage()
    ref = f"ckptpy{os.getpid()}:1"
    r = api.post("/v1/images/import", {"path": img, "ref": ref})
    assert r.status == 201, r
    sid = api.create(image=ref, memory_mb=512)
    try:
        out = api.run(sid, ["sh", "-c", "mkfifo /tmp/pin && cat > /tmp/repl.py <<'EOF'\n"
                            + PYREPL + "EOF\n"
                            "python3 /tmp/repl.py >/dev/null 2>&1 </dev/null & "
                            "i=0; while [ ! -e /tmp/pout ] && [ $i -lt 400 ]; do sleep 0.05; "
                            "i=$((i+1)); done; cat /tmp/pout"])
        assert out["stdout"] == "ready\n", out
        assert py(api, sid, "x = 21") == ""
        assert py(api, sid, "def double(v): return v * 2") == ""
        assert py(api, sid, "import json; state = {'seen': [x]}") == ""
        assert py(api, sid, "double(x), len(big) >> 20") == "(42, 48)\n"
        before = memory_bytes(api, sid)
        assert before > 48 << 20, before
        pause(api, sid, keep_memory=False)
        assert procs_of(warrend, sid) == set()
        after = memory_bytes(api, sid)
        assert after < before - (40 << 20), (before, after)
        resume(api, sid)
        assert py(api, sid, "state['seen'].append(double(x)); json.dumps(state)") == \
            "'{\"seen\": [21, 42]}'\n"
        assert py(api, sid, "big[4096:4097], sum(big[::1 << 20]) // ord('x')") == \
            "(bytearray(b'x'), 48)\n"
    finally:
        api.kill(sid)


def test_criu_under_tmp(criu, fresh_daemon, tmp_path):
    """The restore's criu runs in a mount namespace with a tmpfs over /tmp
    (where it finds the pins): a criu binary kept under /tmp (a build or a
    checkout there, as in a CI clone) still starts."""
    import shutil
    assert str(tmp_path).startswith("/tmp/")
    copy = tmp_path / "warren-criu"
    shutil.copy2(criu, copy)
    d = fresh_daemon(extra={"criu": str(copy)}).start()
    c = d.client()
    sid = c.create()
    try:
        assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
        assert repl(c, sid, "x=4; echo $x") == "4\n"
        pause(c, sid, keep_memory=False)
        assert resume(c, sid)["state"] == "running"
        assert repl(c, sid, "echo $((x*x))") == "16\n"
    finally:
        c.kill(sid)
        c.close()
