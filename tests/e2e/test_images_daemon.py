"""The image store across daemon restarts and under a quota (each test
runs a warrend of its own)."""
import json
import subprocess
import time

from test_images import imp, tar_of, tar_of_dir


def small(i):
    return tar_of([("./", None, 0o755), (f"./file{i}", b"x" * 100 * (i + 1), 0o644)])


def test_holders_survive_restart(fresh_daemon):
    d = fresh_daemon().start()
    api = d.client()
    img = imp(api, tar_of_dir(d.images / "busybox"), ref="keep:1")
    sid = api.create(image="keep:1")
    # a read flushes the batched events: they are durable before the crash
    assert len(api.get("/v1/images/events").json()["events"]) == 1
    api.close()
    d.kill9()
    d.start()
    api = d.client()
    try:
        # the sandbox survived and still holds its image
        assert api.run(sid, ["echo", "alive"])["stdout"] == "alive\n"
        assert api.get("/v1/images/keep:1").json()["holders"] == 1
        r = api.delete(f"/v1/images/{img['digest']}?force=1")
        assert r.status == 409, r
        api.kill(sid)
        # a sandbox that ended holds nothing
        assert api.get("/v1/images/keep:1").json()["holders"] == 0
        r = api.delete(f"/v1/images/{img['digest']}?force=1")
        assert r.status == 200 and r.json()["removed"] is True, r
        assert api.get(f"/v1/images/{img['digest']}").status == 404
        # node-level image events, seq dense across the restart
        evs = api.get("/v1/images/events").json()["events"]
        assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
        assert [e["type"] for e in evs] == ["image_imported", "image_removed"], evs
        assert evs[0]["detail"]["refs"] == ["keep:1"]
        assert evs[1]["detail"] == {"digest": img["digest"], "size": img["size"],
                                    "reason": "removed", "ref": img["digest"]}
        assert api.get("/v1/images/events?since=1").json()["events"] == evs[1:]
        r = api.get("/v1/images/events?limit=0")
        assert r.status == 400 and r.error == ("invalid_argument", "limit"), r
    finally:
        api.close()


def test_quota_auto_gc_respects_pins_and_use(fresh_daemon):
    d = fresh_daemon(extra={"image_store": {"quota": 1, "grace": 0,
                                            "high_water_pct": 90}}).start()
    api = d.client()
    try:
        pinned = imp(api, small(0), ref="q:pinned")
        api.post("/v1/images/q:pinned/pin")
        base = imp(api, tar_of_dir(d.images / "busybox"), ref="q:used")
        sid = api.create(image="q:used")
        # every import passes the high-water mark: the automatic pass removes
        # what it may (the earlier unpinned, unused images), never these two
        for i in range(1, 4):
            imp(api, small(i), ref=f"q:{i}")
            time.sleep(1.1)  # distinct last-use seconds for LRU
        names = {r for i in api.get("/v1/images").json()["images"] for r in i["refs"]}
        assert {"q:pinned", "q:used"} <= names
        assert "q:1" not in names and "q:2" not in names
        assert api.get(f"/v1/images/{pinned['digest']}").json()["pinned"] is True
        assert api.get(f"/v1/images/{base['digest']}").json()["holders"] == 1
        assert "image gc: removed" in d.log_text()
        evs = api.get("/v1/images/events").json()["events"]
        gone = [e["detail"] for e in evs if e["type"] == "image_removed"]
        assert gone and all(g["reason"] == "quota" for g in gone), evs
        rep = api.post("/v1/images/gc").json()
        assert rep["skipped_pinned"] >= 1 and rep["skipped_in_use"] >= 1, rep
        api.kill(sid)
        rep = api.post("/v1/images/gc").json()
        assert base["digest"] in [e["digest"] for e in rep["removed"]], rep
    finally:
        api.close()


def test_bad_image_store_config(build, tmp_path):
    for cfg, needle in [({"image_store": {"quota": "lots"}}, "image_store.quota"),
                        ({"image_store": {"grace": "soon"}}, "image_store.grace"),
                        ({"image_store": {"colour": 1}}, "image_store.colour"),
                        ({"image_store": []}, "image_store")]:
        p = tmp_path / "c.json"
        p.write_text(json.dumps(cfg))
        r = subprocess.run([str(build / "warrend"), "--config", str(p)], capture_output=True,
                           text=True, timeout=30,
                           env={"WARREN_STATE_DIR": str(tmp_path / "s"),
                                "WARREN_RUN_DIR": str(tmp_path / "r")})
        assert r.returncode == 2, (cfg, r.stderr)
        assert needle in r.stderr, (cfg, r.stderr)


def _inotify_delete_self(path):
    """An inotify fd watching path for IN_DELETE_SELF, which the kernel
    sends only when the last reference to the unlinked inode is gone."""
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
    assert fd >= 0
    assert libc.inotify_add_watch(fd, str(path).encode(), 0x400) >= 0  # IN_DELETE_SELF
    return fd


def _freed(fd, seconds):
    import os
    import select
    import struct
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
            buf = os.read(fd, 4096)
            off = 0
            while off + 16 <= len(buf):
                _, mask, _, ln = struct.unpack_from("iIII", buf, off)
                if mask & 0x400:
                    return True
                off += 16 + ln
    return False


def test_reclaimed_image_gives_back_its_space(fresh_daemon):
    """The blob's disk space is freed once the image is removed: no mount
    cached by the daemon or its spawners keeps the unlinked file."""
    import os
    d = fresh_daemon().start()
    api = d.client()
    fd = -1
    try:
        img = imp(api, small(7), ref="gone:1")
        base = imp(api, tar_of_dir(d.images / "busybox"), ref="base:1")
        # the small image as a layer over busybox, so it gets mounted
        r = api.post("/v1/sandboxes", {"image": "base:1", "layers": ["gone:1"], "timeout": 300})
        assert r.status == 201, r
        sid = r.json()["id"]
        assert api.run(sid, ["cat", "/file7"])["stdout"] == "x" * 800
        api.kill(sid)
        blob = d.state / "images" / "blobs" / "sha256" / img["digest"][7:]
        assert blob.exists()
        fd = _inotify_delete_self(blob)
        r = api.delete(f"/v1/images/{img['digest']}?force=1")
        assert r.status == 200 and r.json()["removed"] is True, r
        assert not blob.exists()
        assert _freed(fd, 10), "the removed blob is still held open"
        # the base image, still cached, keeps working
        sid = api.create(image="base:1")
        assert api.run(sid, ["echo", "ok"])["stdout"] == "ok\n"
        api.kill(sid)
        assert api.get(f"/v1/images/{base['digest']}").status == 200
    finally:
        if fd >= 0:
            os.close(fd)
        api.close()
