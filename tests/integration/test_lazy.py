"""On-demand image loading (issue 4): warren-lazyfs serving lazily pulled
EROFS blobs from a real docker-registry on loopback, behind a counting proxy
so the bytes fetched are counted outside lazyfs too. Images are mounted as the
container tier does (file-backed EROFS on the lazyfs file), in the host's
mount namespace under the test's temp dir, and always unmounted."""
import filecmp
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lazy_util import CountingProxy, Lazy, lazytool, make_tree
from registry_util import Registry, free_port, regtool

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")

CHUNK = 1 << 20
OPTS = ["--chunk-size", "1m", "--insecure", "--range-timeout-ms", "2500",
        "--connect-timeout-ms", "1000", "--retries", "1"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


@pytest.fixture(scope="module")
def pushed(build, registry, tmp_path_factory):
    """A ~115 MiB image pushed once: (tree, digest, size, remote ref)."""
    d = tmp_path_factory.mktemp("image")
    tree = make_tree(d / "tree")
    r = regtool(build, "import", d / "store", tree, "big:1")
    assert r.rc == 0, r
    remote = f"{registry.host}/lazy/big:1"
    r = regtool(build, "--insecure", "push", d / "store", "big:1", remote)
    assert r.rc == 0, r
    digest = r.kv["blob"]
    size = (d / "store/blobs/sha256" / digest.split(":")[1]).stat().st_size
    assert size > 100 << 20
    return tree, digest, size


@pytest.fixture
def proxy(registry):
    p = CountingProxy(registry.port)
    yield p
    p.close()


@pytest.fixture
def lazy(build, pushed, proxy, tmp_path):
    """A second node: a fresh store with the image pulled lazily through the
    proxy, and its lazyfs (started by the first acquire)."""
    _, digest, _ = pushed
    store = tmp_path / "node"
    r = regtool(build, "--insecure", "pull", store, f"{proxy.host}/lazy/big:1", "big:1", "lazy")
    assert r.rc == 0 and r.kv["lazy"] == "1", r
    lz = Lazy(build, store, tmp_path / "run", OPTS)
    proxy.reset()
    yield lz
    lz.close()
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()


def wait_gone(pid, timeout=10):
    """Until pid has exited (gone or a zombie)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} still alive")


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def test_lazy_mount_reads_only_needed_bytes(lazy, pushed, proxy, tmp_path):
    tree, digest, size = pushed
    a = lazy.acquire("big:1", "sbx-1")
    assert a["complete"] == "0"
    assert a["path"].startswith(str(lazy.run / "lazyfs/mnt/sha256/"))
    assert os.stat(a["path"]).st_size == size
    m = lazy.mount(a["path"], tmp_path / "m")
    assert read_file(m / "lib/mod007.py") == read_file(tree / "lib/mod007.py")
    st = lazy.stats()
    # Superblock, inodes, the directory and the file: a few 1 MiB chunks of
    # a 115 MiB blob, counted by lazyfs and by the proxy alike.
    assert st["bytes_fetched"] <= 4 * CHUNK, st
    assert proxy.down_bytes < 0.05 * size, proxy.down_bytes
    assert proxy.down_bytes >= st["bytes_fetched"]
    # A big file pulls its own chunks and nothing else.
    assert read_file(m / "data/blob042.bin") == read_file(tree / "data/blob042.bin")
    st2 = lazy.stats()
    assert st2["bytes_fetched"] - st["bytes_fetched"] <= 3 * CHUNK
    assert proxy.down_bytes < 0.1 * size


def test_registry_stalled_or_down_gives_eio_then_recovers(lazy, pushed, proxy, tmp_path):
    tree, digest, _ = pushed
    m = lazy.mount(lazy.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    read_file(m / "lib/mod001.py")
    # Stalled: connections open, no answer. Bounded by the range timeout.
    proxy.stall()
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        read_file(m / "data/blob010.bin")
    took = time.monotonic() - t0
    assert e.value.errno == 5, e.value  # EIO
    assert took < 20, took
    proxy.resume()
    # Down: nothing listens behind the proxy (connections fail at once).
    target = proxy.target
    proxy.target = ("127.0.0.1", free_port())
    try:
        t0 = time.monotonic()
        with pytest.raises(OSError) as e:
            read_file(m / "data/blob011.bin")
        assert e.value.errno == 5
        assert time.monotonic() - t0 < 20
    finally:
        proxy.target = target
    _, _, out, _ = lazy.tool("events", 0)
    assert "fetch_failed" in out and digest in out, out
    assert lazy.stats()["fetch_errors"] >= 1
    # Back: the same reads now work, the mount never went away.
    assert read_file(m / "data/blob010.bin") == read_file(tree / "data/blob010.bin")
    assert read_file(m / "data/blob011.bin") == read_file(tree / "data/blob011.bin")


def test_lazyfs_worker_killed_mount_keeps_working(lazy, pushed, tmp_path):
    tree, _, _ = pushed
    m = lazy.mount(lazy.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    read_file(m / "lib/mod002.py")
    sup, w = lazy.supervisor(), lazy.worker()
    os.kill(w, signal.SIGKILL)
    wait_gone(w)
    # Uncached data after the kill: served by the next worker (requests
    # wait in the kernel's queue meanwhile).
    assert read_file(m / "data/blob020.bin") == read_file(tree / "data/blob020.bin")
    st = lazy.stats()
    assert st["worker_starts"] == 2, st
    assert lazy.supervisor() == sup and lazy.worker() != w
    # A second kill while a read is in flight: that read may fail cleanly
    # (EIO), never hang; the mount serves the next one.
    errs = []

    def reader():
        try:
            read_file(m / "data/blob021.bin")
        except OSError as e:
            errs.append(e.errno)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.05)
    os.kill(lazy.worker(), signal.SIGKILL)
    t.join(30)
    assert not t.is_alive()
    assert set(errs) <= {5}, errs
    assert read_file(m / "data/blob021.bin") == read_file(tree / "data/blob021.bin")


def test_lazyfs_killed_whole_fails_cleanly_and_restarts(lazy, pushed, tmp_path):
    tree, digest, _ = pushed
    m = lazy.mount(lazy.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    read_file(m / "lib/mod003.py")
    time.sleep(0.6)  # fetched chunks are durable within 300 ms (lazy_internal.h)
    sup = lazy.supervisor()
    os.kill(sup, signal.SIGKILL)
    time.sleep(0.3)
    # The old mount's uncached reads fail with EIO at once (no hang).
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        read_file(m / "data/blob030.bin")
    assert e.value.errno in (5, 103, 107), e.value  # EIO, ECONNABORTED, ENOTCONN
    assert time.monotonic() - t0 < 5
    lazy.umount(m)
    # The next acquire starts a new lazyfs that picks the cache up.
    a = lazy.acquire("big:1", "sbx-2")
    assert lazy.supervisor() != sup
    m2 = lazy.mount(a["path"], tmp_path / "m2")
    assert read_file(m2 / "lib/mod003.py") == read_file(tree / "lib/mod003.py")
    assert read_file(m2 / "data/blob030.bin") == read_file(tree / "data/blob030.bin")
    st = lazy.stats(digest)
    assert st["cache_bytes"] > st["bytes_fetched"], st  # earlier chunks were kept


def test_concurrent_first_reads_of_a_chunk_fetch_once(build, pushed, registry, tmp_path):
    _, digest, size = pushed
    slow = CountingProxy(registry.port, latency=0.4)
    store = tmp_path / "node"
    lz = Lazy(build, store, tmp_path / "run", OPTS)
    try:
        r = regtool(build, "--insecure", "pull", store, f"{slow.host}/lazy/big:1", "big:1", "lazy")
        assert r.rc == 0, r
        path = lz.acquire("big:1", "sbx-1")["path"]
        slow.reset()
        off = 37 * CHUNK + 12345
        got, errs = [], []
        barrier = threading.Barrier(8)

        def reader():
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    barrier.wait()
                    got.append(os.pread(fd, 4096, off))
                finally:
                    os.close(fd)
            except OSError as e:
                errs.append(e)

        ts = [threading.Thread(target=reader) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errs and len(got) == 8 and len(set(got)) == 1
        st = lz.stats(digest)
        assert st["fetches"] == 1, st
        assert st["bytes_fetched"] == CHUNK, st
        assert lz.stats()["dedup_waits"] >= 1
        assert slow.down_bytes < 2 * CHUNK
    finally:
        lz.close()
        slow.close()


def test_fetch_all_completes_verifies_and_commits(lazy, pushed, build, tmp_path):
    tree, digest, size = pushed
    lz = Lazy(build, lazy.store, lazy.run, OPTS + ["--fetch-all"])
    m = lz.mount(lz.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            _, _, out, _ = lz.tool("events", 0)
            if " complete " in out:
                break
            time.sleep(0.5)
        assert "committed to the store" in out, out
        # The store has the blob now: a new acquire gets the local file.
        a = lz.acquire("big:1", "sbx-2")
        assert a["complete"] == "1"
        assert a["path"] == str(lazy.store / "blobs/sha256" / digest.split(":")[1])
        # The existing mount keeps reading (from the store's blob).
        assert read_file(m / "data/blob099.bin") == read_file(tree / "data/blob099.bin")
        assert lz.tool("cache-bytes")[1]["bytes"] == "0"
    finally:
        lz.close()


def test_prefetch_replays_the_last_starts_pattern(lazy, pushed, tmp_path):
    tree, digest, _ = pushed
    path = lazy.acquire("big:1", "sbx-1")["path"]
    m = lazy.mount(path, tmp_path / "m")
    names = ["lib/mod010.py", "data/blob050.bin", "data/blob077.bin", "lib/mod200.py"]
    for n in names:
        read_file(m / n)
    lazy.umount(m)
    time.sleep(0.5)  # the release saves the pattern
    first = lazy.stats(digest)
    # Not mounted: the whole cache may go.
    freed = int(lazy.tool("trim", 1 << 40)[1]["freed"])
    assert freed == first["cache_bytes"] and freed > 0
    assert int(lazy.tool("cache-bytes")[1]["bytes"]) == 0
    # The next start: the same chunks come back in the background.
    m = lazy.mount(path, tmp_path / "m")
    deadline = time.monotonic() + 30
    while lazy.stats()["prefetched"] < first["fetches"] - 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    st = lazy.stats()
    assert st["prefetched"] >= first["fetches"] - 1, (st, first)
    before = lazy.stats(digest)["fetches"]
    for n in names:
        assert read_file(m / n) == read_file(tree / n)
    assert lazy.stats(digest)["fetches"] - before <= 1


def test_trim_spares_mounted_incomplete_blobs(lazy, pushed, tmp_path):
    _, digest, _ = pushed
    m = lazy.mount(lazy.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    read_file(m / "data/blob005.bin")
    used = int(lazy.tool("cache-bytes")[1]["bytes"])
    assert used >= 1 << 20
    assert lazy.tool("trim", 1 << 40)[1]["freed"] == "0"
    lazy.umount(m)
    time.sleep(0.3)
    assert int(lazy.tool("trim", 1 << 20)[1]["freed"]) >= 1 << 20
    # lazyfs stopped: usage and trim work on the files directly.
    lazy.tool("stop")
    left = int(lazy.tool("cache-bytes")[1]["bytes"])
    assert left == used - (1 << 20) or left < used
    assert int(lazy.tool("trim", 1 << 40)[1]["freed"]) == left
    assert lazy.tool("cache-bytes")[1]["bytes"] == "0"


def loop_ext4(tmp_path, size_mb=300):
    img = tmp_path / "shared.img"
    with open(img, "wb") as f:
        f.truncate(size_mb << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True,
                         capture_output=True, text=True).stdout.strip()
    return dev


def sectors_read(dev):
    return int(Path(f"/sys/block/{os.path.basename(dev)}/stat").read_text().split()[2])


def test_shared_filesystem_mode_reads_only_touched_blocks(pushed, build, tmp_path):
    """Store on its own file system (a loop-mounted ext4 standing in for NFS,
    CephFS...): the blob is mounted directly and the kernel reads only the
    blocks a start touches, counted at the block device."""
    tree, digest, size = pushed
    dev = loop_ext4(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    mounts = []
    try:
        subprocess.run(["mount", str(dev), str(shared)], check=True)
        mounts.append(shared)
        store = shared / "store"
        r = regtool(build, "import", store, tree, "big:1")
        assert r.rc == 0, r
        # Remount: nothing of the store stays in the page cache.
        subprocess.run(["umount", str(shared)], check=True)
        subprocess.run(["mount", str(dev), str(shared)], check=True)
        blob = store / "blobs/sha256" / digest.split(":")[1]
        before = sectors_read(dev)
        m = tmp_path / "m"
        m.mkdir()
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", str(blob), str(m)], check=True)
        mounts.append(m)
        assert read_file(m / "lib/mod100.py") == read_file(tree / "lib/mod100.py")
        read_bytes = (sectors_read(dev) - before) * 512
        assert read_bytes < 0.05 * size, read_bytes
    finally:
        for x in reversed(mounts):
            subprocess.run(["umount", "-l", str(x)], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_store_gc_trims_the_chunk_cache_and_forget_drops_it(lazy, pushed, tmp_path):
    """The store's gc sees the cache through the lazy hooks and trims it."""
    _, digest, _ = pushed
    m = lazy.mount(lazy.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    read_file(m / "data/blob060.bin")
    used = int(lazy.tool("cache-bytes")[1]["bytes"])
    assert used > 0
    lazy.umount(m)
    lazy.tool("release", digest, "sbx-1")
    time.sleep(0.5)
    rep = lazy.tool("gc", 1)[1]
    assert int(rep["used_before"]) >= used, rep
    assert int(rep["cache_freed"]) == used, rep
    # The remote image's blob is not local: trimming was enough.
    assert rep["removed"] == "0" and rep["used_after"] == "0", rep
    assert lazy.tool("cache-bytes")[1]["bytes"] == "0"
    # The store's forget (an image removed) drops the blob's directory.
    lazy.tool("forget", digest)
    assert not (lazy.store / "chunks" / digest.split(":")[1]).exists()


def test_worker_killed_while_verifying_the_next_one_commits(lazy, pushed, build, tmp_path):
    """All chunks local, the commit to the store not done, the worker
    killed: the next worker verifies and commits. The test holds the
    store's write lock (as any other writer of the store may) so that the
    worker cannot finish its commit before the kill: verification, the copy
    and fsck run, then the record waits for the lock (busy timeout 30 s).
    Without it the whole commit could finish between two polls and the
    kill would land after it (a race the test used to lose when run alone
    on a quiet machine)."""
    tree, digest, size = pushed
    lz = Lazy(build, lazy.store, lazy.run, OPTS + ["--fetch-all"])
    m = lz.mount(lz.acquire("big:1", "sbx-1")["path"], tmp_path / "m")
    db = sqlite3.connect(str(lazy.store / "store.db"), timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        deadline = time.monotonic() + 120
        while lz.stats(digest)["cache_bytes"] < size and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lz.stats(digest)["cache_bytes"] >= size
        w = lz.worker()
        os.kill(w, signal.SIGKILL)
        wait_gone(w)
        # The killed worker's events are in its log: no commit finished.
        log = (lazy.run / "lazyfs/lazyfs.log").read_text(errors="replace")
        assert " complete " not in log, log
        # Released before the next worker opens the store (which writes).
        db.execute("ROLLBACK")
        while time.monotonic() < deadline:
            _, _, out, _ = lz.tool("events", 0)
            if " complete " in out:
                break
            time.sleep(0.2)
        assert "committed to the store" in out, out
        assert lz.stats()["worker_starts"] >= 2
        assert lz.acquire("big:1", "sbx-2")["complete"] == "1"
        assert read_file(m / "data/blob003.bin") == read_file(tree / "data/blob003.bin")
    finally:
        db.close()
        lz.close()


# ---- per-chunk verification (the chunk index) --------------------------------------


def test_corrupted_range_gives_eio_then_recovers(lazy, pushed, proxy, registry, tmp_path):
    """Bytes changed on the way (a registry, a proxy, the network): the read
    that needs them fails with EIO and a clear event, the rest of the image
    keeps working, and once the bytes are right again the same read works:
    nothing bad was cached."""
    tree, digest, size = pushed
    blob = registry.blob_data(digest).read_bytes()
    a = lazy.acquire("big:1", "sbx-1")
    m = lazy.mount(a["path"], tmp_path / "m")
    assert read_file(m / "lib/mod001.py") == read_file(tree / "lib/mod001.py")
    want = read_file(tree / "data/blob042.bin")
    at = blob.find(want[:4096])
    assert at > 0 and blob[at:at + len(want)] == want
    bad = at + len(want) // 2  # one byte in the middle of that file
    proxy.corrupt(digest, bad, bad + 1)
    with pytest.raises(OSError) as e:
        read_file(m / "data/blob042.bin")
    assert e.value.errno == 5, e.value  # EIO
    # The lazyfs file itself: the chunk holding that byte fails, others read.
    fd = os.open(a["path"], os.O_RDONLY)
    try:
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, bad - bad % 4096)
        assert e.value.errno == 5
        far = (bad + 20 * CHUNK) % size
        assert os.pread(fd, 4096, far) == blob[far:far + 4096]
    finally:
        os.close(fd)
    assert read_file(m / "data/blob050.bin") == read_file(tree / "data/blob050.bin")
    assert proxy.corrupted >= 1
    _, _, out, _ = lazy.tool("events", 0)
    assert "chunk_verify_failed" in out and digest in out, out
    assert "do not match the chunk index" in out, out
    st = lazy.stats()
    assert st["verify_errors"] >= 2 and st["fetch_errors"] >= st["verify_errors"], st
    # Right bytes again: the same reads work (the bad chunk was not kept).
    proxy.corrupt(None)
    assert read_file(m / "data/blob042.bin") == want
    fd = os.open(a["path"], os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, bad - bad % 4096) == blob[bad - bad % 4096:][:4096]
    finally:
        os.close(fd)


def test_lazyfs_serves_no_blob_without_its_index(build, pushed, proxy, tmp_path):
    """A lazily pulled record whose index is gone is not served (nothing
    would be verified): the acquire fails with a clear error."""
    _, digest, _ = pushed
    store = tmp_path / "node"
    r = regtool(build, "--insecure", "pull", store, f"{proxy.host}/lazy/big:1", "big:1", "lazy")
    assert r.rc == 0 and r.kv["lazy"] == "1", r
    index = store / "chunks" / digest.split(":")[1] / "index"
    saved = index.read_bytes()
    index.unlink()
    lz = Lazy(build, store, tmp_path / "run", OPTS)
    try:
        rc, _, _, err = lz.tool("acquire", "big:1", "sbx-1", check=False)
        assert rc != 0 and "no chunk index" in err, err
        # The pull puts it back (fetched and checked again); then it serves.
        r = regtool(build, "--insecure", "pull", store, f"{proxy.host}/lazy/big:1", "big:1",
                    "lazy")
        assert r.rc == 0 and index.read_bytes() == saved, r
        assert lz.acquire("big:1", "sbx-1")["complete"] == "0"
    finally:
        lz.close()


@pytest.mark.parametrize("cs", ["96k", "32k", "128m"])
def test_chunk_size_must_be_whole_index_pieces(build, tmp_path, cs):
    rc, _, _, err = lazytool(build, tmp_path / "s", tmp_path / "r", "pid",
                             opts=["--chunk-size", cs], check=False)
    assert rc != 0 and "chunk_size" in err and "64 KiB" in err, err


def test_index_with_larger_pieces_aligns_the_fetches(build, registry, tmp_path):
    """An index of 1 MiB pieces (another tool's choice) served by a lazyfs
    configured for 64 KiB chunks: that blob is fetched in whole 1 MiB
    pieces, every one verified."""
    tree = make_tree(tmp_path / "tree", big_files=6, small_files=20, seed=7)
    r = regtool(build, "import", tmp_path / "a", tree, "g:1")
    assert r.rc == 0, r
    remote = f"{registry.host}/lazy/grain:1"
    env = dict(os.environ, WR_PUSH_INDEX_GRAIN=str(1 << 20))
    p = subprocess.run([str(build / "tests/wr-regtool"), "--insecure", "push", str(tmp_path / "a"),
                        "g:1", remote], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    digest = r.kv["digest"]
    raw = registry.blob_data(
        [ln.split("=", 1)[1] for ln in p.stdout.decode().splitlines()
         if ln.startswith("index=")][0]).read_bytes()
    assert int.from_bytes(raw[12:16], "little") == 1 << 20
    store = tmp_path / "node"
    proxy = CountingProxy(registry.port)
    lz = Lazy(build, store, tmp_path / "run", ["--chunk-size", "64k", "--insecure"])
    try:
        g = regtool(build, "--insecure", "pull", store, f"{proxy.host}/lazy/grain:1", "g:1",
                    "lazy")
        assert g.rc == 0 and g.kv["lazy"] == "1", g
        m = lz.mount(lz.acquire("g:1", "sbx-1")["path"], tmp_path / "m")
        assert read_file(m / "data/blob003.bin") == read_file(tree / "data/blob003.bin")
        meta = (store / "chunks" / digest.split(":")[1] / "meta.json").read_text()
        assert '"chunk_size":1048576' in meta, meta
        st = lz.stats(digest)
        # whole 1 MiB fetches (at most the blob's short last one less),
        # never the 64 KiB the node is configured for
        assert st["fetches"] >= 2, st
        assert st["bytes_fetched"] > (st["fetches"] - 1) * (1 << 20), st
        assert st["verify_errors"] == 0
    finally:
        lz.close()
        proxy.close()


def test_client_refuses_a_lazyfs_that_does_not_verify(build, tmp_path):
    """A lazyfs started by a warren without chunk indexes that outlived the
    upgrade answers register without "verified": the client refuses it
    rather than mount what it would serve unchecked. (A fake lazyfs: a
    control socket answering as the old one did.)"""
    import json
    import socket as so
    run = tmp_path / "run"
    (run / "lazyfs").mkdir(parents=True)
    ls = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    ls.bind(str(run / "lazyfs/ctl.sock"))
    ls.listen(8)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except OSError:
                return
            with c, c.makefile("rwb") as f:
                for line in f:
                    op = json.loads(line)["op"]
                    ans = {"pid": os.getpid()} if op == "ping" else {"path": "/nowhere"}
                    f.write(json.dumps(ans).encode() + b"\n")
                    f.flush()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, _, _, err = lazytool(build, tmp_path / "s", run, "register", "sha256:" + "a" * 64,
                                 4096, "127.0.0.1:1/x@sha256:" + "b" * 64, check=False)
        assert rc != 0 and "does not verify chunks" in err, err
    finally:
        stop.set()
        ls.close()
