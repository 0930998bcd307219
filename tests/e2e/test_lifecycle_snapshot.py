"""Snapshots: a sandbox's filesystem changes (new files, changed files,
deletions, opaque directories) as a store image; a new sandbox from it sees
them; fork N; a snapshot pushed to a registry and pulled on a second node
recreates the stack; lease expiry with on_expire=snapshot."""
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from lifecycle_util import events, start_counter, count, state, wait_state

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


def q(s):
    return quote(s, safe="")


def imp(api, warrend, ref):
    r = api.post("/v1/images/import", {"path": str(warrend.images / "busybox"), "ref": ref})
    assert r.status == 201, r
    return r.json()


def sh(api, sid, cmd):
    r = api.run(sid, ["sh", "-c", cmd])
    assert r["exit_code"] == 0, (r["stdout"], r["stderr"])
    return r["stdout"]


CHANGES = ("mkdir -p /data/sub && echo hello > /data/sub/a && echo v2 > /etc/motd-new && "
           "rm /bin/cpio && rm -rf /usr/sbin && mkdir /opq && echo x > /opq/f && "
           "rm -rf /home && mkdir /home && echo fresh > /home/only && ln -s /data/sub/a /lnk && "
           "chmod 4711 /data/sub/a")
CHECK = ("cat /data/sub/a /etc/motd-new /home/only; readlink /lnk; "
         "stat -c '%a %u:%g' /data/sub/a /etc/motd-new; "
         "test -e /bin/cpio && echo cpio-present; test -e /usr/sbin && echo usrsbin-present; "
         "ls -A /home | tr '\\n' ' '; echo")


def expected():
    return "hello\nv2\nfresh\n/data/sub/a\n4711 0:0\n644 0:0\nonly \n"


def base_check(api, warrend):
    """The base image has what CHANGES removes (else the test proves nothing)."""
    base = api.create(image="snapbase:1")
    try:
        out = sh(api, base, "test -e /bin/cpio && echo cpio; ls -d /usr/sbin; ls -A /home")
        return out
    finally:
        api.kill(base)


def test_snapshot_then_create_sees_files_and_deletions(api, warrend):
    imp(api, warrend, "snapbase:1")
    src = api.create(image="snapbase:1", env={"FROM": "src"}, workdir="/tmp")
    sh(api, src, CHANGES)
    start_counter(api, src)
    name = f"snaps/t{os.getpid()}:1"
    r = api.post(f"/v1/sandboxes/{src}/snapshot", {"name": name})
    assert r.status == 201, r
    img = r.json()
    assert name in img["refs"] and img["source"] == f"snapshot:{src}", img
    # the source keeps running (it was running)
    assert state(api, src) == "running"
    n = count(src)
    deadline = time.time() + 10  # a loaded machine schedules the loop late
    while count(src) <= n and time.time() < deadline:
        time.sleep(0.05)
    assert count(src) > n
    ev = [e for e in events(api, src) if e["type"] == "snapshot"][-1]["detail"]
    assert ev["name"] == name and ev["digest"] == img["digest"], ev
    new = api.create(image=name)
    try:
        got = api.get(f"/v1/sandboxes/{new}").json()
        assert got["image"] == name, got
        assert sh(api, new, CHECK) == expected()
        # the image's defaults: the source's env and workdir
        assert sh(api, new, "echo $FROM; pwd") == "src\n/tmp\n"
        # the counter's file is in it too, and the base is intact
        assert sh(api, new, "test -s /tmp/count && echo y") == "y\n"
    finally:
        api.kill(new)
    # a snapshot of a paused sandbox leaves it paused
    assert api.post(f"/v1/sandboxes/{src}/pause").status == 200
    r = api.post(f"/v1/sandboxes/{src}/snapshot", {"name": name.replace(":1", ":2")})
    assert r.status == 201, r
    assert state(api, src) == "paused"
    # a snapshot of a snapshot-made sandbox stacks
    s2 = api.create(image=name)
    sh(api, s2, "echo third > /third && rm /data/sub/a")
    r = api.post(f"/v1/sandboxes/{s2}/snapshot", {"name": name.replace(":1", ":3")})
    assert r.status == 201, r
    s3 = api.create(image=name.replace(":1", ":3"))
    try:
        assert sh(api, s3, "cat /third; test -e /data/sub/a || echo gone; cat /home/only") == \
            "third\ngone\nfresh\n"
    finally:
        for sid in (s2, s3, src):
            api.kill(sid)
    assert "cpio" in base_check(api, warrend)


def test_snapshot_errors(api, warrend):
    sid = api.create()  # a configured rootfs directory, not a store image
    try:
        r = api.post(f"/v1/sandboxes/{sid}/snapshot", {"name": "x:1"})
        assert r.status == 400 and "store images" in r.json()["error"]["message"], r
        imp(api, warrend, "snapbase:1")
        s2 = api.create(image="snapbase:1")
        r = api.post(f"/v1/sandboxes/{s2}/snapshot", {"name": "Bad Name"})
        assert r.status == 400 and r.error[1] == "name", r
        r = api.post(f"/v1/sandboxes/{s2}/snapshot", {"nope": 1})
        assert r.status == 400, r
        r = api.post(f"/v1/sandboxes/{s2}/fork", {"count": 0})
        assert r.status == 400 and r.error[1] == "count", r
        r = api.post(f"/v1/sandboxes/{s2}/fork", {"image": "x"})
        assert r.status == 400 and r.error[1] == "image", r
        api.kill(s2)
        r = api.post(f"/v1/sandboxes/{s2}/snapshot", {"name": "x:1"})
        assert r.status in (404, 409), r
    finally:
        api.kill(sid)


def test_fork_n(api, warrend):
    imp(api, warrend, "snapbase:1")
    src = api.create(image="snapbase:1", memory_mb=64)
    sh(api, src, "echo state-42 > /state && rm /bin/cpio")
    r = api.post(f"/v1/sandboxes/{src}/fork", {"count": 3, "memory_mb": 96})
    assert r.status == 201, r
    j = r.json()
    kids = [s["id"] for s in j["sandboxes"]]
    assert len(kids) == 3 and len(set(kids)) == 3
    try:
        for k in kids:
            sb = api.get(f"/v1/sandboxes/{k}").json()
            assert sb["state"] == "running" and sb["memory_mb"] == 96, sb
            assert sh(api, k, "cat /state; test -e /bin/cpio || echo no-cpio") == "state-42\nno-cpio\n"
        # forks are independent of each other and of the source
        sh(api, kids[0], "echo changed > /state")
        assert sh(api, kids[1], "cat /state") == "state-42\n"
        assert sh(api, src, "cat /state") == "state-42\n"
    finally:
        for k in kids + [src]:
            api.kill(k)


def test_lease_expiry_snapshots_then_kills(api, warrend):
    imp(api, warrend, "snapbase:1")
    lid = f"snap-{uuid.uuid4().hex[:8]}"
    r = api.post("/v1/leases", {"id": lid, "grace_s": 0.5, "expire_s": 1.5,
                                "on_expire": "snapshot"})
    assert r.status == 201, r
    sid = api.create(image="snapbase:1", lease=lid)
    sh(api, sid, "echo kept > /kept")
    wait_state(api, sid, "killed", limit=15)
    ev = [e for e in events(api, sid) if e["type"] == "killed"][-1]["detail"]
    assert ev["snapshot"] == f"snapshot/{sid}:lease", ev
    assert api.get(f"/v1/leases/{lid}").json()["ended_action"] == "snapshot"
    again = api.create(image=f"snapshot/{sid}:lease")
    try:
        assert sh(api, again, "cat /kept") == "kept\n"
    finally:
        api.kill(again)


@pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                    reason="docker-registry not installed (scripts/deps.sh)")
def test_snapshot_push_pull_second_node(api, warrend, fresh_daemon, tmp_path):
    from registry_util import Registry
    reg = Registry(tmp_path / "reg")
    try:
        base = imp(api, warrend, "snapbase:1")
        src = api.create(image="snapbase:1")
        sh(api, src, "echo travelled > /travel && rm /bin/cpio")
        name = f"snappush{os.getpid()}:1"
        assert api.post(f"/v1/sandboxes/{src}/snapshot", {"name": name}).status == 201
        api.kill(src)
        for ref, to in ((name, "team/snap:1"), ("snapbase:1", "team/base:1")):
            p = api.post(f"/v1/images/{q(ref)}/push", {"to": f"{reg.host}/{to}"})
            assert p.status == 200, p
        node2 = fresh_daemon().start()
        c2 = node2.client()
        try:
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/snap:1", "as": "snap:1"})
            assert g.status == 200, g
            # without its base: a clear error naming the base
            r = c2.post("/v1/sandboxes", {"image": "snap:1"})
            assert r.status == 400 and r.error[1] == "image", r
            assert base["digest"] in r.json()["error"]["message"], r
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/base:1"})
            assert g.status == 200 and g.json()["digest"] == base["digest"], g
            sid = c2.create(image="snap:1")
            try:
                assert sh(c2, sid, "cat /travel; test -e /bin/cpio || echo no-cpio") == \
                    "travelled\nno-cpio\n"
            finally:
                c2.kill(sid)
        finally:
            c2.close()
    finally:
        reg.stop()


def test_cli_snapshot_and_fork(api, warrend):
    from test_cli_client import Cli
    cli = Cli(warrend)
    imp(api, warrend, "snapbase:1")
    sid = cli("create", "--image", "snapbase:1", check=0).out.strip()
    try:
        sh(api, sid, "echo cli > /by-cli")
        name = f"clisnap{os.getpid()}:1"
        out = cli("snapshot", sid, name, check=0).out.split()
        assert out[0] == name and out[1].startswith("sha256:"), out
        j = cli.json("snapshot", sid)
        assert j["refs"][0].startswith(f"snapshot/{sid}:"), j
        kids = cli("fork", "--count", "2", "--memory", "80M", sid, check=0).out.split()
        assert len(kids) == 2, kids
        for k in kids:
            assert api.get(f"/v1/sandboxes/{k}").json()["memory_mb"] == 80
            assert sh(api, k, "cat /by-cli") == "cli\n"
            api.kill(k)
        bad = cli("fork", "--count", "0", sid, check=125)
        assert "--count" in bad.err and len(bad.err.strip().splitlines()) == 1, bad.err
        bad = cli("snapshot", sid, "Bad Name")
        assert bad.returncode != 0 and len(bad.err.strip().splitlines()) == 1, bad.err
    finally:
        api.kill(sid)


def test_sdk_snapshot_and_fork(api, warrend, conn):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))
    import asyncio
    from warren import AsyncSandbox, Sandbox
    imp(api, warrend, "snapbase:1")
    with Sandbox.create(image="snapbase:1", timeout=120, **conn) as sb:
        sb.commands.run("echo sdk > /by-sdk")
        img = sb.snapshot(f"sdksnap{os.getpid()}:1")
        assert img.digest.startswith("sha256:")
        with Sandbox.create(image=f"sdksnap{os.getpid()}:1", timeout=120, **conn) as s2:
            assert s2.commands.run("cat /by-sdk").stdout == "sdk\n"
        kids = sb.fork(2, memory_mb=72)
        try:
            assert len(kids) == 2
            for k in kids:
                assert k.get_info().memory_mb == 72
                assert k.commands.run("cat /by-sdk").stdout == "sdk\n"
        finally:
            for k in kids:
                k.kill()

    async def go():
        a = await AsyncSandbox.create(image="snapbase:1", timeout=120, **conn)
        try:
            await a.commands.run("echo async > /by-async")
            img = await a.snapshot()
            assert img.refs and img.refs[0].startswith("snapshot/")
            kids = await a.fork(1)
            assert (await kids[0].commands.run("cat /by-async")).stdout == "async\n"
            await kids[0].kill()
        finally:
            await a.kill()
    asyncio.run(go())


def test_crash_mid_snapshot(fresh_daemon):
    """kill -9 of the daemon while it captures: after the restart the source
    runs again (the freeze was never recorded), the name points at nothing
    (no half image), and the store's staging area is empty."""
    import threading
    from lifecycle_util import init_pid
    d = fresh_daemon().start()
    c = d.client()
    r = c.post("/v1/images/import", {"path": str(d.images / "busybox"), "ref": "snapbase:1"})
    assert r.status == 201, r
    sid = c.create(image="snapbase:1", disk_mb=1024)
    # enough to copy that the capture is still going when the daemon dies
    sh(c, sid, "for i in $(seq 1 400); do dd if=/dev/urandom of=/f$i bs=1024 count=512 "
                "2>/dev/null; done")
    start_counter(c, sid)
    pid1 = init_pid(sid)
    c.close()
    res = {}

    def snap():
        c2 = d.client()
        try:
            res["r"] = c2.post(f"/v1/sandboxes/{sid}/snapshot", {"name": "crash:1"})
        except Exception as e:  # the daemon dies under it
            res["e"] = e
        finally:
            c2.close()
    t = threading.Thread(target=snap)
    t.start()
    tmp = d.state / "images" / "tmp"
    deadline = time.time() + 20
    while time.time() < deadline and not (tmp.exists() and any(tmp.iterdir())):
        time.sleep(0.01)
    assert tmp.exists() and any(tmp.iterdir()), "the capture never started"
    n = count(sid, pid1)
    time.sleep(0.3)
    assert count(sid, pid1) == n, "not frozen during the capture"
    d.kill9()
    t.join(30)
    assert "r" not in res or res["r"].status != 201, "the capture finished before the kill"
    d.start()
    c = d.client()
    try:
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        deadline = time.time() + 10
        while count(sid, pid1) <= n and time.time() < deadline:
            time.sleep(0.05)
        assert count(sid, pid1) > n, "still frozen after the restart"
        assert c.get("/v1/images/crash:1").status == 404
        assert not any(tmp.iterdir()), list(tmp.iterdir())
        # and a snapshot now works
        assert c.post(f"/v1/sandboxes/{sid}/snapshot", {"name": "crash:1"}).status == 201
        assert c.kill(sid).status == 204
    finally:
        c.close()
