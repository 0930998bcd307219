"""Snapshots with processes (container tier): {"processes": true} saves the
sandbox's process tree with CRIU next to its files; a sandbox created from
the snapshot, or forked with processes, starts with that tree restored
under its own ids, network namespace and file system, and goes on from
where the source was, independently of it (daemon/snapshot.c,
tiers/container_ckpt.c, docs/API-LIFECYCLE.md "Snapshots with processes").

The workload is the shell REPL of test_lifecycle_suspend_container: state
(a counter, 48 MiB of data) in memory only, in an orphan of a finished
command, inside the commands' Landlock domain.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from test_lifecycle_suspend_container import REPL, procs_of, repl
from test_lifecycle_checkpoint import built_criu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


@pytest.fixture
def criu():
    return built_criu()


def imp(api, warrend, ref):
    r = api.post("/v1/images/import", {"path": str(warrend.images / "busybox"), "ref": ref})
    assert r.status == 201, r
    return r.json()


def with_repl(api, warrend):
    """A sandbox from a store image running the REPL, its counter at 21."""
    imp(api, warrend, "procbase:1")
    sid = api.create(image="procbase:1", memory_mb=256)
    api.run(sid, ["sh", "-c", "echo kept > /tmp/file"])
    assert api.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(api, sid, "x=$((x+21)); echo $x ${#big}") == "21 50331648\n"
    return sid


def host_ids(pid):
    """(uid_map's host id of 0, the task's host uid) of a host pid."""
    lower = int(Path(f"/proc/{pid}/uid_map").read_text().split()[1])
    uid = int([ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
               if ln.startswith("Uid:")][0].split()[1])
    return lower, uid


def test_snapshot_with_processes_then_create(criu, api, warrend):
    src = with_repl(api, warrend)
    kids = []
    try:
        src_ids = {host_ids(p)[0] for p in procs_of(warrend, src)}
        r = api.post(f"/v1/sandboxes/{src}/snapshot",
                     {"name": "procsnap:1", "processes": True})
        assert r.status == 201, r
        snap = r.json()
        pdig = snap["config"]["labels"]["dev.warren.snapshot.processes"]
        assert pdig.startswith("sha256:"), snap
        p = api.get(f"/v1/images/{quote(pdig, safe='')}")
        assert p.status == 200 and p.json()["config"]["labels"]["dev.warren.processes.source"] == src, p
        # the source runs on, unchanged
        assert api.get(f"/v1/sandboxes/{src}").json()["state"] == "running"
        assert repl(api, src, "x=$((x+1)); echo $x") == "22\n"

        for _ in range(2):
            k = api.create(image="procsnap:1", memory_mb=192)
            kids.append(k)
            info = api.get(f"/v1/sandboxes/{k}").json()
            assert info["state"] == "running" and info["memory_mb"] == 192, info
            # the REPL goes on from the snapshot's state, with its memory
            assert repl(api, k, "x=$((x+100)); echo $x ${#big}") == "121 50331648\n"
            assert api.run(k, ["cat", "/tmp/file"])["stdout"] == "kept\n"
            # under this sandbox's ids, not the source's
            pids = procs_of(warrend, k)
            assert len(pids) >= 2, pids
            ids = {host_ids(p) for p in pids}
            assert all(lo not in src_ids for lo, _ in ids), (ids, src_ids)
            assert all(u >= lo for lo, u in ids), ids
            # still in the commands' Landlock domain: PID 1 out of reach
            assert "refused" in repl(api, k, "kill -0 1 2>/dev/null && echo reached || "
                                             "echo refused")
        # independent of each other and of the source
        assert repl(api, kids[0], "echo $x") == "121\n"
        assert repl(api, src, "echo $x") == "22\n"
        assert len({host_ids(min(procs_of(warrend, k)))[0] for k in kids}) == 2
    finally:
        for k in kids + [src]:
            api.kill(k)


def test_fork_with_processes(criu, api, warrend):
    src = with_repl(api, warrend)
    kids = []
    try:
        r = api.post(f"/v1/sandboxes/{src}/fork", {"count": 2, "processes": True})
        assert r.status == 201, r
        kids = [s["id"] for s in r.json()["sandboxes"]]
        assert len(kids) == 2
        for i, k in enumerate(kids):
            assert repl(api, k, f"x=$((x+{i + 1})); echo $x") == f"{22 + i}\n"
        assert repl(api, src, "echo $x") == "21\n"
        # the unpacked copy of the processes is gone with the creates
        assert list((warrend.state / "images" / "tmp").iterdir()) == []
        # a fork's REPL pauses to disk and back like any sandbox's
        p = api.post(f"/v1/sandboxes/{kids[0]}/pause", {"keep_memory": False})
        assert p.status == 200, p
        assert api.post(f"/v1/sandboxes/{kids[0]}/resume", {}).status == 200
        assert repl(api, kids[0], "echo $x ${#big}") == "22 50331648\n"
        # and a restored tree is snapshotted with its processes in turn
        r = api.post(f"/v1/sandboxes/{kids[0]}/snapshot", {"name": "chain:1",
                                                           "processes": True})
        assert r.status == 201, r
        kids.append(api.create(image="chain:1"))
        assert repl(api, kids[-1], "x=$((x*2)); echo $x") == "44\n"
        assert repl(api, kids[0], "echo $x") == "22\n"
    finally:
        for k in kids + [src]:
            api.kill(k)


def test_processes_errors(criu, api, warrend):
    src = with_repl(api, warrend)
    made = []
    try:
        r = api.post(f"/v1/sandboxes/{src}/snapshot", {"processes": "yes"})
        assert r.status == 400 and r.error[1] == "processes", r
        r = api.post(f"/v1/sandboxes/{src}/fork", {"processes": 1})
        assert r.status == 400 and r.error[1] == "processes", r
        # files only: a create asking for processes is refused
        assert api.post(f"/v1/sandboxes/{src}/snapshot", {"name": "filesnap:1"}).status == 201
        r = api.post("/v1/sandboxes", {"image": "filesnap:1", "processes": True})
        assert r.status == 400 and r.error[1] == "processes", r
        r = api.post("/v1/sandboxes", {"image": "procbase:1", "processes": "no"})
        assert r.status == 400 and r.error[1] == "processes", r
        # with processes: another tier is refused, files only on request
        assert api.post(f"/v1/sandboxes/{src}/snapshot",
                        {"name": "procsnap2:1", "processes": True}).status == 201
        r = api.post("/v1/sandboxes", {"image": "procsnap2:1", "tier": "function"})
        assert r.status == 400 and r.error[1] == "tier", r
        r = api.post("/v1/sandboxes", {"image": "procsnap2:1", "processes": False})
        assert r.status == 201, r
        made.append(r.json()["id"])
        assert api.run(made[-1], ["cat", "/tmp/file"])["stdout"] == "kept\n"
        assert len(procs_of(warrend, made[-1])) == 1  # PID 1 only: no REPL
        # a call in flight: refused after a bounded wait, and nothing made
        t = threading.Thread(target=lambda: api.run(src, ["sleep", "4"]))
        t.start()
        time.sleep(0.5)
        t0 = time.time()
        r = api.post(f"/v1/sandboxes/{src}/snapshot", {"name": "busy:1", "processes": True})
        assert r.status == 409 and "in flight" in r.json()["error"]["message"], r
        assert time.time() - t0 >= 1.5
        t.join()
        assert api.get(f"/v1/images/{quote('busy:1', safe='')}").status == 404
        # paused to disk: refused with the way out
        assert api.post(f"/v1/sandboxes/{src}/pause", {"keep_memory": False}).status == 200
        r = api.post(f"/v1/sandboxes/{src}/snapshot", {"processes": True})
        assert r.status == 409 and "resume" in r.json()["error"]["message"], r
        assert api.post(f"/v1/sandboxes/{src}/resume", {}).status == 200
        assert repl(api, src, "echo $x") == "21\n"
    finally:
        for k in made + [src]:
            api.kill(k)


@pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                    reason="docker-registry not installed (scripts/deps.sh)")
def test_snapshot_with_processes_on_a_second_node(criu, api, warrend, fresh_daemon, tmp_path):
    from registry_util import Registry
    reg = Registry(tmp_path / "reg")
    try:
        src = with_repl(api, warrend)
        name = f"procpush{os.getpid()}:1"
        r = api.post(f"/v1/sandboxes/{src}/snapshot", {"name": name, "processes": True})
        assert r.status == 201, r
        api.kill(src)
        p = api.post(f"/v1/images/{quote(name, safe='')}/push", {"to": f"{reg.host}/team/psnap:1"})
        assert p.status == 200, p
        assert p.json().get("processes", {}).get("digest") == \
            r.json()["config"]["labels"]["dev.warren.snapshot.processes"], p
        p = api.post(f"/v1/images/procbase:1/push", {"to": f"{reg.host}/team/pbase:1"})
        assert p.status == 200, p
        # the second node shares the first one's snapshot key
        key = warrend.state / "snapshot.key"
        assert key.stat().st_mode & 0o777 == 0o600
        node2 = fresh_daemon(extra={"snapshot_key": str(key)}).start()
        c2 = node2.client()
        try:
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/pbase:1"})
            assert g.status == 200, g
            # a create from the registry reference pulls the snapshot and
            # its processes, then restores them
            sid = c2.create(image=f"{reg.host}/team/psnap:1")
            try:
                assert repl(c2, sid, "x=$((x+1)); echo $x ${#big}") == "22 50331648\n"
            finally:
                c2.kill(sid)
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/psnap:1", "as": "ps:1"})
            assert g.status == 200 and g.json()["processes"]["already"] is True, g
            # named after the snapshot: gc's pruning of unnamed images
            # leaves them
            p = c2.get("/v1/images/ps.processes:1")
            assert p.status == 200 and p.json()["digest"] == g.json()["processes"]["digest"], p
        finally:
            c2.close()
        # an explicit pull brings the processes along; a node with a key of
        # its own does not restore them (criu would run whatever a hand-made
        # image asks for), but takes the files
        node3 = fresh_daemon().start()
        c3 = node3.client()
        try:
            g = c3.post("/v1/images/pull", {"ref": f"{reg.host}/team/pbase:1"})
            assert g.status == 200, g
            g = c3.post("/v1/images/pull", {"ref": f"{reg.host}/team/psnap:1", "as": "ps:1"})
            assert g.status == 200, g
            pr = g.json()["processes"]
            assert pr["already"] is False and pr["bytes_fetched"] > 0, pr
            assert pr["ref"] == f"{reg.host}/team/psnap:processes-{pr['digest'][7:]}", pr
            r = c3.post("/v1/sandboxes", {"image": "ps:1"})
            assert r.status == 400 and r.error[1] == "image", r
            assert "snapshot key" in r.json()["error"]["message"], r
            sid = c3.create(image="ps:1", processes=False)
            try:
                assert c3.run(sid, ["cat", "/tmp/file"])["stdout"] == "kept\n"
                assert len(procs_of(node3, sid)) == 1
            finally:
                c3.kill(sid)
        finally:
            c3.close()
    finally:
        reg.stop()


def test_cli_and_sdk(criu, api, warrend, conn):
    from test_cli_client import Cli
    cli = Cli(warrend)
    src = with_repl(api, warrend)
    made = []
    try:
        out = cli("snapshot", "--processes", src, "cliprocs:1", check=0).out.split()
        assert out[0] == "cliprocs:1", out
        j = api.get("/v1/images/cliprocs:1").json()
        assert j["config"]["labels"]["dev.warren.snapshot.processes"].startswith("sha256:"), j
        made.append(cli("create", "--image", "cliprocs:1", check=0).out.strip())
        assert repl(api, made[-1], "echo $x") == "21\n"
        made.append(cli("create", "--image", "cliprocs:1", "--no-processes", check=0).out.strip())
        assert len(procs_of(warrend, made[-1])) == 1
        kids = cli("fork", "--processes", "--memory", "300M", src, check=0).out.split()
        made += kids
        assert len(kids) == 1 and repl(api, kids[0], "echo $x") == "21\n"
        assert api.get(f"/v1/sandboxes/{kids[0]}").json()["memory_mb"] == 300

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))
        import asyncio
        from warren import AsyncSandbox, Sandbox
        sb = Sandbox.connect(src, **conn)
        img = sb.snapshot("sdkprocs:1", processes=True)
        assert img.processes and img.processes.startswith("sha256:"), img
        assert sb.snapshot("sdkfiles:1").processes is None
        with pytest.raises(TypeError, match="processes"):
            sb.snapshot(processes="yes")
        files = Sandbox.create(image="sdkprocs:1", processes=False, **conn)
        made.append(files.sandbox_id)
        assert len(procs_of(warrend, files.sandbox_id)) == 1
        k = sb.fork(1, processes=True)[0]
        made.append(k.sandbox_id)
        assert repl(api, k.sandbox_id, "x=$((x+2)); echo $x") == "23\n"

        async def go():
            a = await AsyncSandbox.connect(src, **conn)
            ks = await a.fork(1, processes=True)
            made.append(ks[0].sandbox_id)
            im = await a.snapshot(processes=True)
            return im
        im = asyncio.run(go())
        assert im.processes, im
        assert repl(api, made[-1], "echo $x") == "21\n"
    finally:
        for k in made + [src]:
            api.kill(k)


def criu_dumping(pid1):
    """Host pids of criu processes dumping pid1."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            args = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dump" in args and b"-t" in args and str(pid1).encode() in args:
            out.append(int(p.name))
    return out


def test_crash_mid_snapshot_with_processes(criu, fresh_daemon):
    """kill -9 of the daemon while criu dumps the tree: criu outlives it
    (killed mid-dump it would take the tasks its parasite is in along) and
    freezes the tree again when it ends. A next start that comes while criu
    still runs waits for it before making the sandbox match its record
    (running): the tree is thawed and goes on, and no snapshot exists."""
    import threading
    from lifecycle_util import frozen, init_pid
    d = fresh_daemon().start()
    c = d.client()
    imp(c, d, "procbase:1")
    sid = c.create(image="procbase:1", memory_mb=1024)
    assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
    assert repl(c, sid, "x=7; echo $x") == "7\n"
    # more memory makes the dump last long enough to be cut
    c.run(sid, ["sh", "-c", "setsid sh -c 'b=$(head -c 200000000 /dev/zero | tr \"\\0\" x); "
                            "echo held > /tmp/held; sleep 1000' >/dev/null 2>&1 &"
                            " i=0; while [ ! -e /tmp/held ] && [ $i -lt 600 ]; do sleep 0.1; "
                            "i=$((i+1)); done"])
    pid1 = init_pid(sid)
    c.close()
    res = {}

    def snap():
        c2 = d.client()
        try:
            res["r"] = c2.post(f"/v1/sandboxes/{sid}/snapshot",
                               {"name": "cut:1", "processes": True})
        except Exception as e:  # the daemon dies under it
            res["e"] = e
        finally:
            c2.close()
    t = threading.Thread(target=snap)
    t.start()
    deadline = time.time() + 20
    while time.time() < deadline and not criu_dumping(pid1):
        time.sleep(0.005)
    assert criu_dumping(pid1), "the dump never started"
    d.kill9()
    # criu held (SIGSTOP) so that the restart comes while it still runs
    held = criu_dumping(pid1)
    assert held, "criu ended with the daemon"
    for p in held:
        os.kill(p, signal.SIGSTOP)
    t.join(30)
    assert "r" not in res or res["r"].status != 201, "the snapshot finished before the kill"
    started = threading.Thread(target=d.start)
    started.start()
    time.sleep(1.5)
    for p in held:
        os.kill(p, signal.SIGCONT)
    started.join(60)
    c = d.client()
    try:
        assert not criu_dumping(pid1)
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert not frozen(d, sid)
        assert repl(c, sid, "echo $((x+1))") == "8\n"
        assert c.get("/v1/images/cut:1").status == 404
        # and a snapshot with processes now works
        r = c.post(f"/v1/sandboxes/{sid}/snapshot", {"name": "cut:1", "processes": True})
        assert r.status == 201, r
        assert c.kill(sid).status == 204
    finally:
        c.close()


def test_crash_mid_create_with_processes(criu, fresh_daemon):
    """kill -9 of the daemon while criu restores a snapshot's processes into
    a new sandbox: the create was never recorded nor answered, so the next
    start removes all of it (the half-restored tree, its cgroups, uid range,
    pins and work directory); the snapshot stays usable."""
    import threading
    d = fresh_daemon().start()
    c = d.client()
    src = with_repl(c, d)
    assert c.post(f"/v1/sandboxes/{src}/snapshot",
                  {"name": "mid:1", "processes": True}).status == 201
    c.close()
    res = {}

    def create():
        c2 = d.client()
        try:
            res["r"] = c2.post("/v1/sandboxes", {"image": "mid:1"})
        except Exception as e:  # the daemon dies under it
            res["e"] = e
        finally:
            c2.close()

    def restoring():
        out = []
        for p in Path("/proc").iterdir():
            try:
                args = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"restore" in args and b"--userns-lower-base" in args:
                out.append(int(p.name))
        return out
    t = threading.Thread(target=create)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and not restoring():
        time.sleep(0.005)
    held = restoring()
    assert held, "the restore never started"
    for p in held:
        os.kill(p, signal.SIGSTOP)
    d.kill9()
    t.join(30)
    assert "r" not in res, res
    d.start()
    c = d.client()
    try:
        ids = [s["id"] for s in c.get("/v1/sandboxes").json()["sandboxes"]]
        assert ids == [src], ids
        def left():
            return [e.name for top in (d.run / "ckpt", d.state / "ckpt") if top.exists()
                    for e in top.iterdir()]
        deadline = time.time() + 10
        while time.time() < deadline and left():
            time.sleep(0.1)
        assert left() == [], "pins or work directory left"
        assert not [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                    if str(d.run / "ckpt") in ln]
        assert not restoring()
        k = c.create(image="mid:1")
        assert repl(c, k, "echo $x") == "21\n"
        assert c.kill(k).status == 204
        assert c.kill(src).status == 204
    finally:
        c.close()


def test_snapshot_key(warrend, tmp_path):
    """The key that signs processes: made at the first start (0600); a
    configured one readable by others, or too short, stops the daemon (a
    node with another key refuses the processes: the second-node test)."""
    from harness import BUILD, Daemon
    for mode, data, why in ((0o644, os.urandom(32), "readable"),
                            (0o600, b"short", "32 bytes")):
        k = tmp_path / f"key{mode}"
        k.write_bytes(data)
        k.chmod(mode)
        d = Daemon(BUILD, tmp_path / f"d{mode}", f"key{mode}", extra={"snapshot_key": str(k)})
        p = subprocess.run([str(d.build / "warrend"), "--config", str(d.config)],
                           capture_output=True, text=True, timeout=60, env=d.env)
        assert p.returncode != 0 and "snapshot_key" in p.stderr and why in p.stderr, p.stderr
    # the default: made at the first start, the owner's alone, kept
    key = warrend.state / "snapshot.key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
