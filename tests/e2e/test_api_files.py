"""Files and tar routes: round trips, streaming of large bodies, and paths
that try to leave the sandbox. Every test runs on each tier (vmtiers.py:
the VM tiers share one VM per module); the answers are the same."""
import hashlib
import io
import os
import tarfile

import pytest

from vmtiers import tier_fixtures

api, sandbox, tier = tier_fixtures(["container", "microvm", "vm"])


def fs(sid, route=""):
    return f"/v1/sandboxes/{sid}/files{route}"


def test_write_read_stat_exists(api, sandbox):
    r = api.put(fs(sandbox) + "?path=/tmp/a/b.txt&parents=true&mode=0640", b"hello\n")
    assert r.status == 200, r
    e = r.json()
    assert (e["path"], e["name"], e["type"], e["size"], e["mode"]) == (
        "/tmp/a/b.txt", "b.txt", "file", 6, "0640")
    assert e["uid"] == 0 and e["gid"] == 0 and e["mtime"].endswith("Z")
    g = api.get(fs(sandbox) + "?path=/tmp/a/b.txt")
    assert g.status == 200 and g.body == b"hello\n"
    assert g.headers["Content-Type"] == "application/octet-stream"
    assert api.get(fs(sandbox, "/stat") + "?path=/tmp/a/b.txt").json() == e
    assert api.get(fs(sandbox, "/exists") + "?path=/tmp/a/b.txt").json() == {"exists": True}
    assert api.get(fs(sandbox, "/exists") + "?path=/tmp/nope").json() == {"exists": False}
    # the sandbox sees it, owned by its user
    out = api.run(sandbox, "cat /tmp/a/b.txt; stat -c '%u %a' /tmp/a/b.txt")
    assert out["stdout"] == "hello\n0 640\n"
    # replace keeps the mode; binary content round-trips
    data = bytes(range(256)) * 10
    api.put(fs(sandbox) + "?path=/tmp/a/b.txt", data)
    assert api.get(fs(sandbox) + "?path=/tmp/a/b.txt").body == data
    assert api.get(fs(sandbox, "/stat") + "?path=/tmp/a/b.txt").json()["mode"] == "0640"
    # without parents a missing directory is 404
    r = api.put(fs(sandbox) + "?path=/tmp/x/y/z", b"")
    assert r.status == 404, r


def test_files_owned_by_the_sandbox_user(api, tier):
    if tier.name == "vm":
        pytest.skip("a second VM boot of the vm tier costs minutes under TCG")
    sid = tier.create(api, user=1000)
    try:
        api.put(fs(sid) + "?path=/tmp/mine", b"x")
        assert api.run(sid, "stat -c %u /tmp/mine; echo more >> /tmp/mine && echo ok")[
            "stdout"] == "1000\nok\n"
    finally:
        api.kill(sid)


def test_large_file_streams_both_ways(api, sandbox):
    data = os.urandom(24 << 20)
    r = api.put(fs(sandbox) + "?path=/tmp/big.bin", data)
    assert r.status == 200 and r.json()["size"] == len(data)
    assert api.run(sandbox, ["sha256sum", "/tmp/big.bin"])["stdout"].split()[0] == \
        hashlib.sha256(data).hexdigest()
    g = api.get(fs(sandbox) + "?path=/tmp/big.bin")
    assert g.status == 200 and hashlib.sha256(g.body).digest() == hashlib.sha256(data).digest()


def test_list_mkdir_rename_remove(api, sandbox):
    r = api.post(fs(sandbox, "/mkdir"), {"path": "/w/a/b", "parents": True, "mode": "0700"})
    assert r.status == 200 and r.json()["type"] == "dir" and r.json()["mode"] == "0700"
    api.put(fs(sandbox) + "?path=/w/a/f1", b"1")
    api.put(fs(sandbox) + "?path=/w/a/b/f2", b"22")
    one = api.get(fs(sandbox, "/list") + "?path=/w/a").json()["entries"]
    assert sorted((e["path"], e["type"]) for e in one) == [("/w/a/b", "dir"), ("/w/a/f1", "file")]
    deep = api.get(fs(sandbox, "/list") + "?path=/w&depth=3").json()["entries"]
    assert sorted(e["path"] for e in deep) == ["/w/a", "/w/a/b", "/w/a/b/f2", "/w/a/f1"]
    r = api.post(fs(sandbox, "/rename"), {"from": "/w/a", "to": "/w/c"})
    assert r.status == 200 and r.json()["path"] == "/w/c"
    assert api.get(fs(sandbox) + "?path=/w/c/b/f2").body == b"22"
    r = api.delete(fs(sandbox) + "?path=/w/c")
    assert r.status == 409, r  # not empty
    assert api.delete(fs(sandbox) + "?path=/w/c&recursive=true").status == 204
    assert api.get(fs(sandbox, "/exists") + "?path=/w/c").json() == {"exists": False}
    assert api.delete(fs(sandbox) + "?path=/w/c").status == 404


def test_paths_stay_inside(api, sandbox, tier):
    # .. and absolute symlinks resolve inside the sandbox root
    api.run(sandbox, "echo inside > /tmp/marker; ln -s / /tmp/rootlink; ln -s /etc /tmp/etc")
    for p in ("/../../../../tmp/marker", "tmp/../../tmp/marker", "/tmp/rootlink/tmp/marker"):
        r = api.get(fs(sandbox) + f"?path={p}")
        assert r.status == 200 and r.body == b"inside\n", (p, r)
    inside = api.run(sandbox, ["cat", "/etc/hostname"])["stdout"].encode()
    r = api.get(fs(sandbox) + "?path=/../../../etc/hostname")
    assert r.status == 200 and r.body == inside, r
    # writes through a symlink to "/" land in the sandbox, not on the host
    r = api.put(fs(sandbox) + "?path=/tmp/rootlink/tmp/written-via-link", b"w")
    assert r.status == 200
    assert api.run(sandbox, ["cat", "/tmp/written-via-link"])["stdout"] == "w"
    assert not os.path.exists("/tmp/written-via-link")
    # /proc of the sandbox is out of reach (magic links, other mounts)
    r = api.get(fs(sandbox) + "?path=/proc/self/root/etc/hostname")
    if tier.name == "vm":
        # the guest's kernel resolves the magic link to the guest's own root
        # (the whole guest is the sandbox: nothing of the host behind it)
        assert r.status == 200 and r.body == inside, r
    else:
        assert r.status in (400, 404), r
    r = api.get(fs(sandbox) + "?path=/proc/1/environ")
    assert r.status in (400, 404), r


def make_tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for e in entries:
            ti = tarfile.TarInfo(e["name"])
            ti.type = e.get("type", tarfile.REGTYPE)
            ti.mode = e.get("mode", 0o644)
            data = e.get("data", b"")
            if ti.type == tarfile.REGTYPE:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            else:
                ti.linkname = e.get("link", "")
                t.addfile(ti)
    return buf.getvalue()


def test_tar_upload_and_download(api, sandbox):
    blob = make_tar([
        {"name": "./", "type": tarfile.DIRTYPE, "mode": 0o755},
        {"name": "proj", "type": tarfile.DIRTYPE, "mode": 0o750},
        {"name": "proj/main.py", "data": b"print(1)\n", "mode": 0o755},
        {"name": "proj/sub/deep.txt", "data": b"deep"},
        {"name": "proj/link", "type": tarfile.SYMTYPE, "link": "main.py"},
        {"name": "proj/hard", "type": tarfile.LNKTYPE, "link": "proj/main.py"},
    ])
    r = api.put(fs(sandbox, "/tar") + "?path=/work", blob)
    assert r.status == 200, r
    assert r.json() == {"files": 3, "bytes": 22}  # regular files (a hard link is one)
    out = api.run(sandbox, "cd /work/proj && cat main.py sub/deep.txt hard; readlink link;"
                  " stat -c %a . main.py")
    assert out["stdout"] == "print(1)\ndeepprint(1)\nmain.py\n750\n755\n", out
    g = api.get(fs(sandbox, "/tar") + "?path=/work")
    assert g.status == 200 and g.headers["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(g.body)) as t:
        names = {m.name: m for m in t.getmembers()}
        assert {"proj", "proj/main.py", "proj/sub", "proj/sub/deep.txt", "proj/link",
                "proj/hard"} <= set(names)
        assert t.extractfile("proj/sub/deep.txt").read() == b"deep"
        assert names["proj/link"].issym() and names["proj/link"].linkname == "main.py"
        assert names["proj/main.py"].mode & 0o777 == 0o755
    # a single file downloads as a one-entry archive named after it
    g = api.get(fs(sandbox, "/tar") + "?path=/work/proj/main.py")
    with tarfile.open(fileobj=io.BytesIO(g.body)) as t:
        assert [m.name for m in t.getmembers()] == ["main.py"]


def test_tar_gzip_upload(api, sandbox):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        ti = tarfile.TarInfo("z.txt")
        ti.size = 3
        t.addfile(ti, io.BytesIO(b"zzz"))
    r = api.put(fs(sandbox, "/tar") + "?path=/gz", buf.getvalue())
    assert r.status == 200 and r.json() == {"files": 1, "bytes": 3}


def test_tar_bad_entries_fail_whole_upload(api, sandbox):
    bad = [
        ([{"name": "ok.txt", "data": b"x"}, {"name": "/etc/evil", "data": b"x"}], "/etc/evil"),
        ([{"name": "ok.txt", "data": b"x"}, {"name": "a/../../evil", "data": b"x"}],
         "a/../../evil"),
        ([{"name": "l", "type": tarfile.SYMTYPE, "link": "/etc"},
          {"name": "l/passwd", "data": b"pwned"}], "l/passwd"),
        ([{"name": "d", "type": tarfile.SYMTYPE, "link": "/"},
          {"name": "d/x/y", "data": b"pwned"}], "d/x/y"),
        ([{"name": "fifo", "type": tarfile.FIFOTYPE}], "fifo"),
        ([{"name": "dev", "type": tarfile.CHRTYPE}], "dev"),
        ([{"name": "h", "type": tarfile.LNKTYPE, "link": "/etc/shadow"}], "h"),
        ([{"name": "h", "type": tarfile.LNKTYPE, "link": "not-in-archive"}], "h"),
    ]
    for i, (entries, field) in enumerate(bad):
        dest = f"/bad{i}"
        r = api.put(fs(sandbox, "/tar") + f"?path={dest}", make_tar(entries))
        assert r.status == 400, (entries, r)
        assert r.error == ("invalid_argument", field), (entries, r)
        # validated before anything was written
        assert api.get(fs(sandbox, "/exists") + f"?path={dest}").json() == {"exists": False}
    assert api.run(sandbox, ["cat", "/etc/passwd"])["stdout"].find("pwned") < 0
    r = api.put(fs(sandbox, "/tar") + "?path=/x", b"this is not a tar archive" * 100)
    assert r.status == 400 and r.error == ("invalid_argument", "body")


def test_tar_over_quota_is_413(api, tier):
    if tier.name == "vm":
        pytest.skip("a second VM boot of the vm tier costs minutes under TCG")
    quota = 2 if tier.name == "container" else 16  # MiB: a microVM's smallest disk
    sid = tier.create(api, disk_mb=quota)
    try:
        blob = make_tar([{"name": "big", "data": b"\0" * ((quota + 1) << 20)}])
        r = api.put(fs(sid, "/tar") + "?path=/q", blob)
        assert r.status == 413 and r.error[0] == "payload_too_large", r
        # a plain write over the quota too, and nothing of it is left
        r = api.put(fs(sid) + "?path=/q2", b"\1" * ((quota + 1) << 20))
        assert r.status == 413 and r.error[0] == "payload_too_large", r
        assert api.get(fs(sid, "/exists") + "?path=/q2").json() == {"exists": False}
        # within the upload limit but over what the disk still holds: the
        # disk fills, the write fails whole, the old content stays
        api.put(fs(sid) + "?path=/keep", b"old")
        api.run(sid, ["sh", "-c", f"dd if=/dev/zero of=/fill bs=1M count={quota} 2>/dev/null;"
                                  " true"])
        r = api.put(fs(sid) + "?path=/keep", b"\2" * ((quota - 1) << 20))
        assert r.status >= 400, r
        assert api.get(fs(sid) + "?path=/keep").body == b"old"
        assert not [e for e in api.get(fs(sid, "/list") + "?path=/").json()["entries"]
                    if "wr-tmp" in e["name"]]
    finally:
        api.kill(sid)
