"""The file-access trail (fanotify, opt-in per sandbox at create): what an
agent opened, read, wrote and executed, as events of layer "file" with the
path as the sandbox sees it, the process, and never a host path."""
import json
import os
import subprocess
import time

import pytest

import warren
from warren._http import ConnectionConfig, SyncHTTP
from conftest import BUILD
from redlib import probe


def _http(rt):
    return SyncHTTP(ConnectionConfig.resolve(**rt.alice))


def _create(rt, **body):
    """POST /v1/sandboxes with fields the SDK does not know yet."""
    body.setdefault("image", "busybox")
    body.setdefault("timeout", 600)
    d = _http(rt).json("POST", "/sandboxes", json=body)
    return warren.Sandbox.connect(d["id"], **rt.alice)


def _file_events(rt, sid, want, wait=8.0):
    """The sandbox's file events, once every (action, subject) in want is there."""
    deadline = time.time() + wait
    while True:
        evs = (_http(rt).json("GET", "/events", params={"layer": "file", "sandbox": sid,
                                                         "limit": 1000}) or {})["events"]
        have = {(e["action"], e["subject"]) for e in evs}
        if want <= have or time.time() > deadline:
            return evs, have


def _status(rt, body):
    try:
        _http(rt).json("POST", "/sandboxes", json={"image": "busybox", **body})
    except warren.exceptions.WarrenError as e:
        return e.status, str(e)
    return 200, ""


@probe("x-file-trail", ["container/uid0", "container/uid1000"])
def test_x_file_trail(ctx):
    rt = ctx.rt
    sb = _create(rt, file_trail=True)
    ctx.made.append(sb)
    r = sb.commands.run(["sh", "-c", "cat /etc/passwd >/dev/null; echo hi > /tmp/trail-w; "
                         "wr-probe read /etc/hostname"], user=ctx.uid)
    assert r.exit_code == 0, r
    want = {("open", "/etc/passwd"), ("read", "/etc/passwd"), ("write", "/tmp/trail-w"),
            ("exec", "/usr/bin/wr-probe")}
    evs, have = _file_events(rt, sb.sandbox_id, want)
    assert want <= have, sorted(have)[:40]
    for e in evs:
        # the trail is not a refusal, and names the sandbox's own process
        assert e["layer"] == "file" and e["denied"] is False, e
        assert e["tenant"] == "alice", e
        assert e["subject"].startswith("/"), e
    ex = [e for e in evs if e["action"] == "exec" and e["subject"] == "/usr/bin/wr-probe"][0]
    assert ex["process"]["pid"] > 0 and ex["process"]["host_pid"] > 0, ex
    assert ex["process"]["comm"], ex
    # nothing of the host: no store, overlay or daemon path, no canary
    rt.check_output("file trail events", json.dumps(evs))
    # the CLI shows the same trail (the Unix socket: an admin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
    env["WARREN_SOCKET"] = str(rt.d.sock)
    p = subprocess.run([str(BUILD / "warren"), "events", "--layer", "file", "--sandbox",
                        sb.sandbox_id, "--last", "1000", "--json"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    out = json.loads(p.stdout)
    cli = out["events"] if isinstance(out, dict) else out
    assert ("exec", "/usr/bin/wr-probe") in {(e["action"], e["subject"]) for e in cli}, cli[:5]
    # what it does right before its kill is still recorded (drained at the end)
    sb.commands.run(["sh", "-c", "echo last > /tmp/trail-last"], user=ctx.uid)
    assert sb.kill()
    ctx.made.remove(sb)
    _, have = _file_events(rt, sb.sandbox_id, {("write", "/tmp/trail-last")}, wait=3)
    assert ("write", "/tmp/trail-last") in have, sorted(have)[:40]


@probe("x-file-trail", ["api"])
def test_x_file_trail_off_and_validated(rt, rt_key):
    # off by default: a sandbox without the field has no file events
    sb = warren.Sandbox.create(image="busybox", timeout=600, **rt.alice)
    try:
        sb.commands.run(["cat", "/etc/passwd"])
        time.sleep(1.5)
        evs, _ = _file_events(rt, sb.sandbox_id, set(), wait=0)
        assert evs == [], evs[:5]
    finally:
        sb.kill()
    # a subset: only writes
    sb = _create(rt, file_trail={"events": ["write"]})
    try:
        sb.commands.run(["sh", "-c", "cat /etc/passwd >/dev/null; echo x > /tmp/only-w"])
        evs, have = _file_events(rt, sb.sandbox_id, {("write", "/tmp/only-w")})
        assert ("write", "/tmp/only-w") in have and {a for a, _ in have} == {"write"}, have
    finally:
        sb.kill()
    # bad values: 400 naming the field
    for body, field in (({"file_trail": "yes"}, "file_trail"),
                        ({"file_trail": {"events": ["bogus"]}}, "file_trail.events"),
                        ({"file_trail": {"events": []}}, "file_trail.events"),
                        ({"file_trail": {"every": True}}, "file_trail")):
        code, msg = _status(rt, body)
        assert code == 400 and field in msg, (body, code, msg)


@pytest.mark.parametrize("rt_key", [("x-file-trail", "host")], ids=["host"])
def test_x_file_trail_cleanup(rt, rt_key):
    """A trail's fanotify group ends with its sandbox: no fd left open."""
    def fanotify_fds():
        n = 0
        fds = f"/proc/{rt.d.proc.pid}/fd"
        for f in os.listdir(fds):
            try:
                n += "anon_inode:[fanotify]" == os.readlink(f"{fds}/{f}")
            except OSError:
                pass
        return n
    n0 = fanotify_fds()
    sb = _create(rt, file_trail=True)
    assert fanotify_fds() == n0 + 1
    sb.kill()
    # the kill's answer comes once its processes are gone; the group is
    # closed right after, with the cgroup
    deadline = time.time() + 5
    while fanotify_fds() != n0 and time.time() < deadline:
        time.sleep(0.1)
    assert fanotify_fds() == n0
