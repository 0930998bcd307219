"""Image store through warrend: every import format (OCI layout and docker
archives built here with tarfile/json/hashlib, no network), whiteouts,
hostile tars, digest stability, tags, removal rules, gc, and sandboxes
created from store refs."""
import gzip
import hashlib
import io
import json
import os
import tarfile
import urllib.parse


def q(s):
    return urllib.parse.quote(s, safe="")


def tar_of_dir(root, arc="", mtime=None):
    """A rootfs tar of a directory (owners and modes kept)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        t.add(root, arcname=arc or ".", recursive=True)
    return buf.getvalue()


def tar_of(entries):
    """entries: list of (name, data or None for a dir, mode)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1000
            ti.mode = mode
            if data is None:
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif isinstance(data, tuple):  # ("sym", target) / ("lnk", target)
                ti.type = tarfile.SYMTYPE if data[0] == "sym" else tarfile.LNKTYPE
                ti.linkname = data[1]
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def oci_layout(dst, layers, config):
    """Write an OCI image layout with an index -> manifest -> config + layers."""
    os.makedirs(dst / "blobs" / "sha256")

    def put(b):
        (dst / "blobs" / "sha256" / hashlib.sha256(b).hexdigest()).write_bytes(b)
        return sha(b)

    cfg = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": put(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": put(gzip.compress(l, mtime=0)),
                    "size": len(gzip.compress(l, mtime=0))} for l in layers],
    }
    m = json.dumps(manifest).encode()
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(m),
         "size": len(m), "platform": {"os": "linux", "architecture": "amd64"}}]}
    (dst / "index.json").write_text(json.dumps(index))
    (dst / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')


def docker_archive(layers, config):
    """A `docker save` archive (the classic format: <id>/layer.tar)."""
    cfg = json.dumps(config).encode()
    cid = hashlib.sha256(cfg).hexdigest()
    files = {f"{cid}.json": cfg}
    paths = []
    for l in layers:
        lid = hashlib.sha256(l).hexdigest()
        files[f"{lid}/layer.tar"] = l
        files[f"{lid}/VERSION"] = b"1.0"
        paths.append(f"{lid}/layer.tar")
    files["manifest.json"] = json.dumps(
        [{"Config": f"{cid}.json", "RepoTags": ["demo:1"], "Layers": paths}]).encode()
    return tar_of([(n, d, 0o644) for n, d in files.items()])


def base_config(layers, env=None, workdir=None):
    return {"architecture": "amd64", "os": "linux",
            "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"],
                       "WorkingDir": workdir or "", "Cmd": ["sh"]},
            "rootfs": {"type": "layers",
                       "diff_ids": [sha(l) for l in layers]}}


def imp(api, body, expect=201, **params):
    qs = "&".join(f"{k}={q(v)}" for k, v in params.items())
    r = api.request("POST", "/v1/images/import" + (f"?{qs}" if qs else ""), body=body)
    assert r.status == expect, r
    return r.json()


def imp_path(api, path, expect=201, **kw):
    r = api.request("POST", "/v1/images/import",
                    body=json.dumps(dict(path=str(path), **kw)).encode())
    assert r.status == expect, r
    return r.json()


def test_import_dir_and_run(api, warrend):
    img = imp_path(api, warrend.images / "busybox", ref="bb:dir")
    assert img["digest"].startswith("sha256:") and "bb:dir" in img["refs"]
    # the first import of this content names the source (the session's
    # daemon may have seen the same tree as a tar first)
    assert img["source"].split(":")[0] in ("dir", "tar")
    got = api.get("/v1/images/bb:dir").json()
    assert got["digest"] == img["digest"] and got["size"] > 0
    sid = api.create(image="bb:dir")
    try:
        assert api.run(sid, ["echo", "hi"])["stdout"] == "hi\n"
        # in use: removal by digest refuses, even forced
        r = api.delete(f"/v1/images/{img['digest']}?force=1")
        assert r.status == 409, r
        assert "in use" in r.json()["error"]["message"]
        assert api.get("/v1/images/bb:dir").json()["holders"] == 1
    finally:
        api.kill(sid)


def test_tar_upload_digest_stable_and_tags(api, warrend):
    body = tar_of_dir(warrend.images / "busybox")
    a = imp(api, body, ref="bb:tar")
    b = imp(api, gzip.compress(body, mtime=0), ref="bb:tar2")
    assert a["digest"] == b["digest"]
    refs = api.get(f"/v1/images/{a['digest']}").json()["refs"]
    assert {"bb:tar", "bb:tar2"} <= set(refs)
    # a tar of a directory builds the same blob as the directory itself
    assert a["digest"] == imp_path(api, warrend.images / "busybox")["digest"]
    # a tag moves to new content; the old digest stays
    extra = tar_of([("./", None, 0o755), ("./marker", b"v2", 0o644)])
    c = imp(api, extra, ref="bb:tar")
    assert c["digest"] != a["digest"]
    assert api.get("/v1/images/bb:tar").json()["digest"] == c["digest"]
    assert api.get(f"/v1/images/{a['digest']}").status == 200
    r = api.post("/v1/images/bb:tar2/tag", {"ref": "bb:moved"})
    assert r.status == 200 and "bb:moved" in r.json()["refs"]
    # removing a name leaves the image while another name points at it
    r = api.delete("/v1/images/bb:tar2")
    assert r.status == 200 and r.json()["removed"] is False
    assert api.get("/v1/images/bb:moved").json()["digest"] == a["digest"]


def test_oci_layout_layers_whiteouts_config(api, warrend, tmp_path):
    base = tar_of_dir(warrend.images / "busybox")
    top = tar_of([("etc/", None, 0o755), ("etc/.wh.hostname", b"", 0o644),
                  ("opt/", None, 0o755), ("opt/app/", None, 0o755),
                  ("opt/app/run.sh", b"echo app\n", 0o755)])
    cfg = base_config([base, top], env=["PATH=/bin:/usr/bin", "GREETING=hello"],
                      workdir="/opt/app")
    oci_layout(tmp_path / "layout", [base, top], cfg)
    img = imp_path(api, tmp_path / "layout", ref="oci:1")
    assert img["source"].startswith("oci-layout:")
    assert len(img["layers"]) == 2
    assert img["config"]["workdir"] == "/opt/app"
    assert "GREETING=hello" in img["config"]["env"]
    sid = api.create(image="oci:1")
    try:
        out = api.run(sid, ["sh", "-c", "echo $GREETING; pwd; sh run.sh; "
                                        "test -e /etc/hostname || echo gone"])["stdout"]
        assert out == "hello\n/opt/app\napp\ngone\n"
        # the request overrides the image's defaults
        sid2 = api.create(image="oci:1", workdir="/", env={"GREETING": "hi"})
        try:
            out = api.run(sid2, ["sh", "-c", "echo $GREETING; pwd"])["stdout"]
            assert out == "hi\n/\n"
        finally:
            api.kill(sid2)
    finally:
        api.kill(sid)
    # a corrupted layer blob is refused by digest
    blobs = tmp_path / "layout" / "blobs" / "sha256"
    for p in blobs.iterdir():
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b" and len(data) < 10000:
            p.write_bytes(gzip.compress(b"evil" * 10))
    r = api.request("POST", "/v1/images/import",
                    body=json.dumps({"path": str(tmp_path / "layout")}).encode())
    assert r.status == 400, r
    assert "digest mismatch" in r.json()["error"]["message"]


def test_archives_docker_and_oci(api, warrend, tmp_path):
    base = tar_of_dir(warrend.images / "busybox")
    top = tar_of([("hello.txt", b"from docker\n", 0o644)])
    cfg = base_config([base, top])
    d = imp(api, docker_archive([base, top], cfg), ref="dock:1")
    assert d["source"] == "docker-archive:upload"
    oci_layout(tmp_path / "l", [base, top], cfg)
    arch = io.BytesIO()
    with tarfile.open(fileobj=arch, mode="w") as t:
        for name in ("oci-layout", "index.json", "blobs"):
            t.add(tmp_path / "l" / name, arcname=name)
    o = imp(api, arch.getvalue(), ref="ocia:1")
    # the same layers give the same tree, so the same digest (and the first
    # import's provenance stays)
    assert o["digest"] == d["digest"]
    assert {"dock:1", "ocia:1"} <= set(o["refs"])
    sid = api.create(image="dock:1")
    try:
        assert api.run(sid, ["cat", "/hello.txt"])["stdout"] == "from docker\n"
    finally:
        api.kill(sid)


def test_hostile_tars_rejected(api):
    before = len(api.get("/v1/images").json()["images"])
    cases = [
        (tar_of([("../../etc/evil", b"x", 0o644)]), "'..' component refused"),
        (tar_of([("link", ("sym", "/etc"), 0o777), ("link/passwd", b"x", 0o644)]),
         "is a symlink"),
        (tar_of([("h", ("lnk", "/etc/shadow"), 0o644)]), "absolute path refused"),
    ]
    for body, needle in cases:
        r = api.request("POST", "/v1/images/import?format=tar&ref=evil:1", body=body)
        assert r.status == 400, r
        assert needle in r.json()["error"]["message"], r
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("dev/sda")
        ti.type = tarfile.BLKTYPE
        t.addfile(ti)
    r = api.request("POST", "/v1/images/import", body=buf.getvalue())
    assert r.status == 400 and "device nodes are refused" in r.json()["error"]["message"], r
    assert len(api.get("/v1/images").json()["images"]) == before
    assert api.get("/v1/images/evil:1").status == 404


def test_validation_errors(api, alice, warrend):
    r = api.request("POST", "/v1/images/import?format=nope", body=b"x" * 1024)
    assert r.status == 400 and r.json()["error"].get("field") == "format", r
    r = api.post("/v1/images/bb:none/tag", {"ref": "Bad Name"})
    assert r.status in (400, 404), r
    # a TCP tenant that is no admin may not change the store at all
    r = alice.request("POST", "/v1/images/import",
                      body=json.dumps({"path": str(warrend.images / "busybox")}).encode())
    assert r.status == 403 and r.json()["error"]["code"] == "permission_denied", r
    r = api.create(expect=404, image="nosuch:tag")
    assert r.json()["error"].get("field") == "image", r


def test_pin_and_gc(api, warrend):
    img = imp(api, tar_of([("./", None, 0o755), ("./gc-me", b"1", 0o644)]), ref="gc:1")
    keep = imp(api, tar_of([("./", None, 0o755), ("./pinned", b"1", 0o644)]), ref="gc:2")
    assert api.post("/v1/images/gc:2/pin").json()["pinned"] is True
    # untag both; the pinned one survives pruning, the other is within grace
    api.delete("/v1/images/gc:1")
    api.delete("/v1/images/gc:2")
    r = api.post("/v1/images/gc?prune_untagged=1&dry_run=1")
    assert r.status == 200, r
    rep = r.json()
    assert rep["dry_run"] is True
    assert all(e["digest"] != keep["digest"] for e in rep["removed"])
    assert api.get(f"/v1/images/{img['digest']}").status in (200, 404)
    assert api.post(f"/v1/images/{keep['digest']}/unpin").json()["pinned"] is False


def test_layers_stack_through_api(api, warrend):
    imp(api, tar_of_dir(warrend.images / "busybox"), ref="stack/base")
    tk = imp(api, tar_of([("opt/", None, 0o755), ("opt/tool", b"tool v1\n", 0o644),
                          ("etc/", None, 0o755), ("etc/motd", b"toolkit\n", 0o644)]),
             ref="stack/toolkit:1")
    ws = imp(api, tar_of([("work/", None, 0o755), ("work/file", b"ws\n", 0o644),
                          ("etc/", None, 0o755), ("etc/motd", b"workspace\n", 0o644)]),
             ref="stack-ws")
    sid = api.create(image="stack/base", layers=["stack/toolkit:1", ws["digest"]])
    try:
        out = api.run(sid, ["sh", "-c", "cat /opt/tool /work/file /etc/motd; "
                                        "echo new > /work/file && cat /work/file"])
        assert out["stdout"] == "tool v1\nws\nworkspace\nnew\n", out
        for ref in ("stack/toolkit:1", "stack-ws"):
            r = api.get(f"/v1/images/-?ref={q(ref)}")
            assert r.status == 200 and r.json()["holders"] == 1, r
        r = api.delete(f"/v1/images/{tk['digest']}?force=1")
        assert r.status == 409, r
    finally:
        api.kill(sid)
    # bad layers name the entry
    r = api.create(expect=404, image="stack/base", layers=["stack-ws", "nosuch:1"])
    assert r.json()["error"]["field"] == "layers[1]", r
    r = api.create(expect=400, image="stack/base", layers="stack-ws")
    assert r.json()["error"]["field"] == "layers", r
    r = api.create(expect=400, image="stack/base", layers=["stack-ws"] * 17)
    assert r.json()["error"]["field"] == "layers", r
