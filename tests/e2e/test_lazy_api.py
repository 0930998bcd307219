"""On-demand loading through warrend (issue 4): an image pulled with
"lazy": true runs before its blob is local. The store's acquire returns the
warren-lazyfs file (wr_lazy_attach in the daemon's store options), the
container tier mounts it like any EROFS file, and lazyfs outlives a restart
of warrend, and the mounts outlive a lazyfs killed -9 (warrend's mount keeper
holds the FUSE connection and starts the next lazyfs on it, which has the
kernel resend what the dead one had not answered)."""
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from lazy_util import CountingProxy, lazytool  # noqa: E402
from registry_util import Registry  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


def q(s):
    return urllib.parse.quote(s, safe="")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


def test_lazy_pull_runs_before_the_blob_is_local(api, warrend, registry, fresh_daemon, build,
                                                 tmp_path):
    # A bigger image than busybox: busybox plus 40 MiB the command never reads.
    root = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(root)], check=True)
    (root / "ballast").mkdir()
    for i in range(40):
        (root / "ballast" / f"b{i}").write_bytes(os.urandom(1 << 20))
    r = api.post("/v1/images/import", {"path": str(root), "ref": "lz:1"})
    assert r.status == 201, r
    img = r.json()
    remote = f"{registry.host}/team/lz:1"
    assert api.post(f"/v1/images/{q('lz:1')}/push", {"to": remote}).status == 200

    proxy = CountingProxy(registry.port)
    node = fresh_daemon().start()
    c = node.client()
    store, run = node.state / "images", node.run
    try:
        g = c.post("/v1/images/pull", {"ref": f"{proxy.host}/team/lz:1", "as": "lz:1",
                                       "lazy": True})
        assert g.status == 200, g
        assert g.json()["complete"] is False
        proxy.reset()
        sid = c.create(image="lz:1")
        out = c.run(sid, ["cat", "/etc/passwd"])
        assert out["exit_code"] == 0 and "root" in out["stdout"], out
        time.sleep(0.5)  # read-ahead fetches in flight land
        _, st, _, _ = lazytool(build, store, run, "stats")
        fetched = proxy.down_bytes
        assert fetched < 0.25 * img["size"], (fetched, img["size"])
        assert int(st["blobs"]) == 1 and int(st["bytes_fetched"]) <= fetched
        # warrend restarts; lazyfs and the running sandbox's image stay.
        pid = lazytool(build, store, run, "pid")[1]["pid"]
        node.stop()
        node.start()
        c.close()
        c = node.client()
        out = c.run(sid, ["sh", "-c", "cat /ballast/b7 | wc -c"])
        assert out["stdout"].strip() == str(1 << 20), out
        assert lazytool(build, store, run, "pid")[1]["pid"] == pid
        c.kill(sid)
    finally:
        c.close()
        node.finish()
        lazytool(build, store, run, "stop", check=False)
        proxy.close()
    assert str(run) not in Path("/proc/self/mounts").read_text()


# ---- mounts that outlive warren-lazyfs (lazyfs.h: resend mode, the keeper) ----

@pytest.fixture(scope="module")
def ballast_image(warrend, registry, tmp_path_factory):
    """busybox + 40 x 1 MiB of random files, pushed once: (remote path,
    sha256 of each ballast file)."""
    import hashlib
    root = tmp_path_factory.mktemp("keep") / "rootfs"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(root)], check=True)
    (root / "ballast").mkdir()
    sums = {}
    for i in range(40):
        data = os.urandom(1 << 20)
        (root / "ballast" / f"b{i}").write_bytes(data)
        sums[f"b{i}"] = hashlib.sha256(data).hexdigest()
    ref = f"lzk{os.getpid()}:1"
    api = warrend.client()
    assert api.post("/v1/images/import", {"path": str(root), "ref": ref}).status == 201
    assert api.post(f"/v1/images/{q(ref)}/push",
                    {"to": f"{registry.host}/team/lzk:1"}).status == 200
    api.close()
    return "team/lzk:1", sums


def lazyfs_procs(run):
    """pids of every warren-lazyfs process serving this run dir."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
            state = (p / "stat").read_text().split(")")[1].split()[0]
        except OSError:
            continue
        if state != "Z" and argv and argv[0].endswith(b"warren-lazyfs") and \
                str(run).encode() in argv:
            found.append(int(p.name))
    return found


def supervisor(run):
    try:
        return int((run / "lazyfs/pid").read_text())
    except (OSError, ValueError):
        return 0


def worker(run):
    sup = supervisor(run)
    return int(Path(f"/proc/{sup}/task/{sup}/children").read_text().split()[0])


def fuse_fds(pid):
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd) == "/dev/fuse"
        except OSError:
            pass
    return n


def wait_for(cond, timeout=30, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def kill_and_wait(pid):
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or
             Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z",
             10, f"{pid} to die")


def sha_in(c, sid, name):
    out = c.run(sid, ["sha256sum", f"/ballast/{name}"])
    assert out["exit_code"] == 0, out
    return out["stdout"].split()[0]


def image_events(c):
    r = c.get("/v1/images/events?since=0&limit=1000")
    assert r.status == 200, r
    return r.json()["events"]


def in_background(fn, *args):
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except Exception as e:  # reported by the caller
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def lazy_node(fresh_daemon, registry, remote, env=None):
    proxy = CountingProxy(registry.port)
    node = fresh_daemon()
    node.env.update(env or {})
    node.start()
    c = node.client()
    g = c.post("/v1/images/pull", {"ref": f"{proxy.host}/{remote}", "as": "lzk:1",
                                   "lazy": True})
    assert g.status == 200 and g.json()["complete"] is False, g
    return proxy, node, c


def finish_node(node, build, store, run, proxy):
    """Stop everything the test made, also after a failure: the node, lazyfs,
    a mount a dead lazyfs left (only this test's run dir), the proxy."""
    problems = node.finish()
    lazytool(build, store, run, "stop", check=False)
    mnt = str(run / "lazyfs/mnt")
    if f" {mnt} " in Path("/proc/self/mounts").read_text():
        problems.append(f"{mnt} still mounted after the stop")
    for _ in range(20):
        if f" {mnt} " not in Path("/proc/self/mounts").read_text():
            break
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    proxy.close()
    return problems


def no_leaks(node, run):
    """One lazyfs (supervisor + worker), one mount of it, and warrend holds
    exactly one dup of its connection."""
    assert len(lazyfs_procs(run)) == 2, lazyfs_procs(run)
    mnt = str(run / "lazyfs/mnt")
    assert Path("/proc/self/mounts").read_text().count(f" {mnt} ") == 1
    assert fuse_fds(node.proc.pid) == 1


def test_lazyfs_killed_mounts_keep_working(registry, fresh_daemon, build, ballast_image):
    """The whole lazyfs (supervisor and worker) or its worker killed -9,
    between reads and in the middle of a read stalled on the registry, and an
    upgrade (SIGUSR1): the sandbox's reads wait and then get the right bytes;
    each death and takeover is an image event."""
    remote, sums = ballast_image
    proxy, node, c = lazy_node(fresh_daemon, registry, remote)
    store, run = node.state / "images", node.run
    try:
        sid = c.create(image="lzk:1")
        assert c.run(sid, ["cat", "/etc/passwd"])["exit_code"] == 0
        wait_for(lambda: fuse_fds(node.proc.pid) == 1, 10, "warrend to hold the connection")
        # 1. Killed between reads.
        sup = supervisor(run)
        t0 = time.monotonic()
        kill_and_wait(sup)
        assert sha_in(c, sid, "b1") == sums["b1"]
        took = time.monotonic() - t0
        print(f"takeover: killed -9 to a 1 MiB uncached read done in {took:.2f} s")
        assert took < 15, took
        sup2 = supervisor(run)
        assert sup2 not in (0, sup)
        # 2. The worker killed while a read waits on a stalled registry.
        proxy.stall()
        asked = len(proxy.requests)
        bc = node.client()
        t, box = in_background(sha_in, bc, sid, "b2")
        wait_for(lambda: len(proxy.requests) > asked, 20, "a range request")
        time.sleep(0.3)
        w = worker(run)
        kill_and_wait(w)
        time.sleep(0.5)
        proxy.resume()
        t.join(60)
        assert not t.is_alive() and box.get("value") == sums["b2"], box
        assert supervisor(run) == sup2 and worker(run) != w
        # 3. The whole lazyfs killed while a read waits on the stalled registry.
        proxy.stall()
        asked = len(proxy.requests)
        t, box = in_background(sha_in, bc, sid, "b3")
        wait_for(lambda: len(proxy.requests) > asked, 20, "a range request")
        time.sleep(0.3)
        kill_and_wait(sup2)
        sup3 = wait_for(lambda: supervisor(run) not in (0, sup2) and supervisor(run), 30,
                        "a new lazyfs")
        time.sleep(0.3)
        proxy.resume()
        t.join(60)
        assert not t.is_alive() and box.get("value") == sums["b3"], box
        # 4. An upgrade: SIGUSR1 hands the mounts over (a read waiting meanwhile).
        proxy.stall()
        asked = len(proxy.requests)
        t, box = in_background(sha_in, bc, sid, "b4")
        wait_for(lambda: len(proxy.requests) > asked, 20, "a range request")
        os.kill(sup3, signal.SIGUSR1)
        sup4 = wait_for(lambda: supervisor(run) not in (0, sup3) and supervisor(run), 30,
                        "the next lazyfs")
        proxy.resume()
        t.join(60)
        assert not t.is_alive() and box.get("value") == sums["b4"], box
        assert "handed the mount over" in (run / "lazyfs/lazyfs.log").read_text()
        wait_for(lambda: "lazyfs_handover" in [e["type"] for e in image_events(c)], 10,
                 "the lazyfs_handover event")
        bc.close()
        # Cached and uncached bytes alike after all that.
        for name in ("b1", "b2", "b3", "b4", "b20"):
            assert sha_in(c, sid, name) == sums[name]
        wait_for(lambda: lazyfs_procs(run) and len(lazyfs_procs(run)) == 2, 10, "2 procs")
        no_leaks(node, run)
        assert lazytool(build, store, run, "pid")[1]["pid"] == str(sup4)
        ev = image_events(c)
        types = [e["type"] for e in ev]
        assert types.count("lazyfs_died") >= 2 and types.count("lazyfs_restarted") >= 2, types
        # lazyfs's own: the new one took the mount over. (The "resumed" of
        # the restarted worker may die with its lazyfs before warrend polls.)
        wait_for(lambda: "adopted" in [e["type"] for e in image_events(c)], 10,
                 "lazyfs's adopted event")
        log = (run / "lazyfs/lazyfs.log").read_text()
        assert "resumed" in log and "resend mode" in log, log
        # A clean stop (not a crash) ends the mounts at once: EIO, not a hang.
        lazytool(build, store, run, "stop")
        t0 = time.monotonic()
        out = c.run(sid, ["sh", "-c", "cat /ballast/b30 >/dev/null; echo rc=$?"])
        assert "rc=0" not in out["stdout"], out
        assert time.monotonic() - t0 < 15
        wait_for(lambda: "lazyfs_stopped" in [e["type"] for e in image_events(c)], 10,
                 "the lazyfs_stopped event")
        assert fuse_fds(node.proc.pid) == 0
        c.kill(sid)
    finally:
        proxy.resume()
        c.close()
        problems = finish_node(node, build, store, run, proxy)
    assert not problems, problems
    assert not lazyfs_procs(run)
    assert str(run) not in Path("/proc/self/mounts").read_text()


def sandbox_pids(node):
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if f"/{node.cg_base}/" in (p / "cgroup").read_text():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def test_warrend_and_lazyfs_killed_in_turn(registry, fresh_daemon, build, ballast_image):
    """warrend killed -9 while a sandbox reads, restarted, then lazyfs killed,
    and again: each restarted side takes the connection from the other, the
    reads go on with the right bytes, nothing is left behind."""
    import hashlib
    remote, sums = ballast_image
    proxy, node, c = lazy_node(fresh_daemon, registry, remote)
    store, run = node.state / "images", node.run
    try:
        sid = c.create(image="lzk:1")
        assert c.run(sid, ["cat", "/etc/passwd"])["exit_code"] == 0
        wait_for(lambda: fuse_fds(node.proc.pid) == 1, 10, "warrend to hold the connection")
        pid = wait_for(lambda: sandbox_pids(node), 10, "the sandbox's processes")[0]
        root = Path(f"/proc/{pid}/root")
        stop = threading.Event()
        got = {}

        def reader():  # through the sandbox's own mount, warrend or not
            i = 4
            while not stop.is_set() and i < 40:
                name = f"b{i}"
                try:
                    got[name] = hashlib.sha256((root / "ballast" / name).read_bytes()).hexdigest()
                except OSError as e:
                    got[name] = f"error {e.errno}"
                i += 1
                time.sleep(0.15)
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        for rnd in range(2):
            node.kill9()
            time.sleep(0.3)
            node.start()
            c.close()
            c = node.client()
            wait_for(lambda: fuse_fds(node.proc.pid) == 1, 10, "the keeper to fetch it again")
            sup = supervisor(run)
            kill_and_wait(sup)
            assert sha_in(c, sid, f"b{rnd}") == sums[f"b{rnd}"]
            assert supervisor(run) not in (0, sup)
        stop.set()
        t.join(60)
        assert got and all(v == sums[k] for k, v in got.items()), got
        wait_for(lambda: len(lazyfs_procs(run)) == 2, 10, "one lazyfs")
        no_leaks(node, run)
        c.kill(sid)
    finally:
        c.close()
        problems = finish_node(node, build, store, run, proxy)
    assert not problems, problems
    assert not lazyfs_procs(run)
    assert str(run) not in Path("/proc/self/mounts").read_text()


def test_without_resend_a_killed_lazyfs_ends_its_mounts_cleanly(registry, fresh_daemon, build,
                                                                ballast_image):
    """A kernel older than 6.9 cannot resend (simulated with
    WARREN_LAZYFS_NO_RESEND): lazyfs then keeps its connection to itself, and
    its death ends its mounts at once (an error, never a hang) with an event;
    the next sandbox mounts afresh."""
    remote, sums = ballast_image
    proxy, node, c = lazy_node(fresh_daemon, registry, remote, {"WARREN_LAZYFS_NO_RESEND": "1"})
    store, run = node.state / "images", node.run
    try:
        sid = c.create(image="lzk:1")
        assert c.run(sid, ["cat", "/etc/passwd"])["exit_code"] == 0
        time.sleep(1)
        assert fuse_fds(node.proc.pid) == 0  # not handed over
        assert "cloned fds" in (run / "lazyfs/lazyfs.log").read_text()
        kill_and_wait(supervisor(run))
        t0 = time.monotonic()
        out = c.run(sid, ["sh", "-c", "cat /ballast/b5 >/dev/null; echo rc=$?"])
        assert "rc=0" not in out["stdout"], out
        assert time.monotonic() - t0 < 15
        wait_for(lambda: "lazyfs_died" in [e["type"] for e in image_events(c)], 10,
                 "the lazyfs_died event")
        c.kill(sid)
        sid2 = c.create(image="lzk:1")
        assert sha_in(c, sid2, "b5") == sums["b5"]
        wait_for(lambda: len(lazyfs_procs(run)) == 2, 10, "one lazyfs")
        c.kill(sid2)
    finally:
        c.close()
        problems = finish_node(node, build, store, run, proxy)
    assert not problems, problems
    assert not lazyfs_procs(run)
    assert str(run) not in Path("/proc/self/mounts").read_text()
