"""Registry client and image push/pull against Debian's docker-registry on
loopback (issue 4, Registry). A "second node" is a second store directory.
Content is checked without a sandbox: the pulled EROFS blob is unpacked with
fsck.erofs --extract and compared with the source tree."""
import filecmp
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from registry_util import (FakeBlobRegistry, Registry, TokenServer, extract_blob,
                           htpasswd_line, image_manifest, index_of, oci_layout, regtool)

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


@pytest.fixture
def stores(tmp_path):
    return tmp_path / "nodeA", tmp_path / "nodeB"


def blob_path(store, digest):
    return Path(store) / "blobs/sha256" / digest.split(":")[1]


def same_tree(a, b):
    """Names, types, modes and bytes of two trees match."""
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files, \
        (cmp.left_only, cmp.right_only, cmp.diff_files)
    for sub in cmp.common_dirs:
        same_tree(os.path.join(a, sub), os.path.join(b, sub))


def imported(build, store, src, ref):
    r = regtool(build, "import", store, src, ref)
    assert r.rc == 0, r
    return r.kv["digest"]


# ---- round trip -----------------------------------------------------------------


def test_push_pull_round_trip_same_digest_and_content(build, images, registry, stores, tmp_path):
    a, b = stores
    digest = imported(build, a, images["dir"], "bb:1")
    remote = f"{registry.host}/team/busybox:1"
    p = regtool(build, "push", a, "bb:1", remote)
    assert p.rc == 0, p
    assert p.kv["blob"] == digest and p.kv["sent"] == "3"  # config, chunk index, EROFS
    g = regtool(build, "pull", b, remote, "busybox:1")
    assert g.rc == 0, g
    assert g.kv["digest"] == digest and g.kv["erofs"] == "1" and g.kv["complete"] == "1"
    assert g.kv["manifest"] == p.kv["manifest"]
    # the blob is byte for byte the one of node A
    assert blob_path(b, digest).read_bytes() == blob_path(a, digest).read_bytes()
    out = extract_blob(blob_path(b, digest), tmp_path / "x")
    same_tree(images["dir"], out)
    i = regtool(build, "inspect", b, "busybox:1")
    assert i.rc == 0 and i.kv["source"] == f"registry:{registry.host}/team/busybox@{p.kv['manifest']}"


def test_artifact_format_is_plain_oci(build, images, registry, stores):
    a, _ = stores
    digest = imported(build, a, images["dir"], "bb:fmt")
    remote = f"{registry.host}/team/fmt:1"
    assert regtool(build, "push", a, "bb:fmt", remote).rc == 0
    m = regtool(build, "manifest-get", remote)
    assert m.rc == 0, m
    mt, mdigest, body = m.out.split("\n", 2)
    man = json.loads(body)
    assert mt == "application/vnd.oci.image.manifest.v1+json"
    assert man["artifactType"] == "application/vnd.warren.image.v1"
    assert man["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [layer["mediaType"] for layer in man["layers"]] == [
        "application/vnd.warren.image.erofs.v1", "application/vnd.warren.image.erofs.chunks.v1"]
    assert man["layers"][0]["digest"] == digest
    # skopeo (a plain OCI tool) reads the config and the manifest
    if shutil.which("skopeo"):
        s = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw",
                            f"docker://{remote}"], capture_output=True, timeout=60)
        assert s.returncode == 0, s.stderr
        assert hashlib.sha256(s.stdout).hexdigest() == mdigest.split(":")[1]
        c = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--config",
                            f"docker://{remote}"], capture_output=True, timeout=60)
        assert c.returncode == 0, c.stderr
        cfg = json.loads(c.stdout)
        assert cfg["rootfs"]["diff_ids"] == [digest] and cfg["os"] == "linux"


def test_push_twice_is_idempotent(build, images, registry, stores):
    a, _ = stores
    imported(build, a, images["dir"], "bb:2")
    remote = f"{registry.host}/team/idem:2"
    first = regtool(build, "push", a, "bb:2", remote)
    second = regtool(build, "push", a, "bb:2", remote)
    assert first.rc == 0 and second.rc == 0, (first, second)
    assert second.kv["manifest"] == first.kv["manifest"]
    assert second.kv["sent"] == "0" and second.kv["skipped"] == "3"
    assert second.stats["bytes_out"] < 4096  # the manifest only


def test_pull_twice_is_a_no_op(build, images, registry, stores):
    a, b = stores
    imported(build, a, images["dir"], "bb:3")
    remote = f"{registry.host}/team/twice:3"
    assert regtool(build, "push", a, "bb:3", remote).rc == 0
    first = regtool(build, "pull", b, remote, "t:3")
    second = regtool(build, "pull", b, remote, "t:3b")
    assert first.rc == 0 and second.rc == 0, (first, second)
    assert second.kv["already"] == "1" and second.kv["bytes"] == "0"
    assert second.stats["bytes_in"] < 4096  # the manifest only
    assert second.kv["digest"] == first.kv["digest"]
    assert regtool(build, "inspect", b, "t:3b").kv["digest"] == first.kv["digest"]


def test_lazy_pull_records_remote_then_full_pull_completes(build, images, registry, stores):
    a, b = stores
    digest = imported(build, a, images["dir"], "bb:lazy")
    remote = f"{registry.host}/team/lazy:1"
    assert regtool(build, "push", a, "bb:lazy", remote).rc == 0
    lz = regtool(build, "pull", b, remote, "lz:1", "lazy")
    assert lz.rc == 0, lz
    assert lz.kv["lazy"] == "1" and lz.kv["complete"] == "0" and lz.kv["digest"] == digest
    # only the manifest and the config travelled, not the EROFS blob
    size = blob_path(a, digest).stat().st_size
    assert lz.stats["bytes_in"] < 64 * 1024 < size
    assert not blob_path(b, digest).exists()
    i = regtool(build, "inspect", b, "lz:1")
    assert i.kv["remote"].startswith(f"{registry.host}/team/lazy@sha256:")
    full = regtool(build, "pull", b, remote, "lz:1")
    assert full.rc == 0 and full.kv["complete"] == "1", full
    assert blob_path(b, digest).read_bytes() == blob_path(a, digest).read_bytes()


# ---- chunk index (per-chunk verification of lazy reads) ----------------------------

MT_CHUNKS = "application/vnd.warren.image.erofs.chunks.v1"


def parse_index(raw):
    """The chunk index format (docs/ARCH-IMAGES.md): header, then sums."""
    assert raw[:8] == b"WRNCHIDX"
    version, grain = int.from_bytes(raw[8:12], "little"), int.from_bytes(raw[12:16], "little")
    size = int.from_bytes(raw[16:24], "little")
    return version, grain, size, raw[24:56], raw[56:]


def test_push_makes_a_chunk_index_the_manifest_names(build, images, registry, stores):
    a, _ = stores
    digest = imported(build, a, images["dir"], "bb:ix")
    remote = f"{registry.host}/team/ix:1"
    p = regtool(build, "push", a, "bb:ix", remote)
    assert p.rc == 0, p
    man = json.loads(regtool(build, "manifest-get", remote).out.split("\n", 2)[2])
    idx = [layer for layer in man["layers"] if layer["mediaType"] == MT_CHUNKS]
    assert len(idx) == 1 and idx[0]["digest"] == p.kv["index"], man
    raw = registry.blob_data(p.kv["index"]).read_bytes()
    assert idx[0]["size"] == len(raw)
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == p.kv["index"]
    blob = blob_path(a, digest).read_bytes()
    version, grain, size, bdig, sums = parse_index(raw)
    assert (version, grain, size) == (1, 65536, len(blob))
    assert "sha256:" + bdig.hex() == digest
    pieces = [blob[i:i + grain] for i in range(0, len(blob), grain)]
    assert len(sums) == 32 * len(pieces)
    for i, piece in enumerate(pieces):
        assert sums[32 * i:32 * i + 32] == hashlib.sha256(piece).digest(), i


def test_lazy_pull_keeps_the_index_for_lazyfs(build, images, registry, stores):
    a, b = stores
    digest = imported(build, a, images["dir"], "bb:ixl")
    remote = f"{registry.host}/team/ixl:1"
    p = regtool(build, "push", a, "bb:ixl", remote)
    lz = regtool(build, "pull", b, remote, "ixl:1", "lazy")
    assert lz.rc == 0 and lz.kv["lazy"] == "1" and lz.kv["no_chunk_index"] == "0", lz
    saved = Path(b) / "chunks" / digest.split(":")[1] / "index"
    assert saved.read_bytes() == registry.blob_data(p.kv["index"]).read_bytes()
    # a second lazy pull finds it: manifest only
    again = regtool(build, "pull", b, remote, "ixl:2", "lazy")
    assert again.rc == 0 and again.kv["already"] == "1" and again.kv["bytes"] == "0", again


def test_corrupt_index_is_refused_at_pull(build, images, tmp_path):
    reg = Registry(tmp_path / "reg")
    try:
        a, b = tmp_path / "A", tmp_path / "B"
        digest = imported(build, a, images["dir"], "bb:ci")
        remote = f"{reg.host}/team/ci:1"
        p = regtool(build, "push", a, "bb:ci", remote)
        assert p.rc == 0, p
        data = reg.blob_data(p.kv["index"])
        good = data.read_bytes()
        raw = bytearray(good)
        raw[-1] ^= 0xFF  # one piece's sum
        data.write_bytes(bytes(raw))
        r = regtool(build, "pull", b, remote, "ci:1", "lazy")
        assert r.rc == 1 and r.errno == "EBADMSG" and "chunk index" in r.err, r
        assert regtool(build, "inspect", b, "ci:1").rc == 1
        assert not (b / "chunks" / digest.split(":")[1] / "index").exists()
        data.write_bytes(good)
        # An index that hashes right but describes another blob: another
        # image's index put in this manifest (the registry holds both).
        (tmp_path / "other").mkdir()
        (tmp_path / "other/hello").write_text("another image\n")
        other = imported(build, a, tmp_path / "other", "bb:other")
        po = regtool(build, "push", a, "bb:other", f"{reg.host}/team/ci:other")
        assert po.rc == 0 and other != digest, po
        m = regtool(build, "manifest-get", remote)
        man = json.loads(m.out.split("\n", 2)[2])
        man["layers"][1]["digest"] = po.kv["index"]
        man["layers"][1]["size"] = reg.blob_data(po.kv["index"]).stat().st_size
        f = tmp_path / "man.json"
        f.write_text(json.dumps(man))
        put = regtool(build, "manifest-put", f"{reg.host}/team/ci:swapped",
                      "application/vnd.oci.image.manifest.v1+json", f)
        assert put.rc == 0, put
        r = regtool(build, "pull", b, f"{reg.host}/team/ci:swapped", "ci:2", "lazy")
        assert r.rc == 1 and r.errno == "EBADMSG", r
        assert "chunk index" in r.err and ("another blob" in r.err or "bytes" in r.err), r.err
        assert regtool(build, "inspect", b, "ci:2").rc == 1
        # the genuine manifest still pulls lazily
        ok = regtool(build, "pull", b, remote, "ci:1", "lazy")
        assert ok.rc == 0 and ok.kv["lazy"] == "1", ok
    finally:
        reg.stop()


def test_image_without_index_falls_back_to_full_pull(build, images, registry, stores,
                                                     monkeypatch):
    a, b = stores
    digest = imported(build, a, images["dir"], "bb:old")
    remote = f"{registry.host}/team/old:1"
    monkeypatch.setenv("WR_PUSH_WITHOUT_CHUNK_INDEX", "1")
    p = regtool(build, "push", a, "bb:old", remote)
    monkeypatch.delenv("WR_PUSH_WITHOUT_CHUNK_INDEX")
    assert p.rc == 0 and p.kv["index"] == "", p
    man = json.loads(regtool(build, "manifest-get", remote).out.split("\n", 2)[2])
    assert [layer["mediaType"] for layer in man["layers"]] == [
        "application/vnd.warren.image.erofs.v1"]
    r = regtool(build, "pull", b, remote, "old:1", "lazy")
    assert r.rc == 0, r
    # asked lazy; served in full, verified as a whole before any use
    assert r.kv["lazy"] == "0" and r.kv["no_chunk_index"] == "1" and r.kv["complete"] == "1"
    assert blob_path(b, digest).read_bytes() == blob_path(a, digest).read_bytes()
    # pushing it again with this warren adds the index; the blob is skipped
    again = regtool(build, "push", a, "bb:old", remote)
    assert again.rc == 0 and again.kv["index"].startswith("sha256:"), again
    assert again.kv["sent"] == "1", again  # the index only


def test_pull_by_digest_and_digest_mismatch(build, images, registry, stores):
    a, b = stores
    imported(build, a, images["dir"], "bb:dg")
    remote = f"{registry.host}/team/bydigest:1"
    p = regtool(build, "push", a, "bb:dg", remote)
    assert p.rc == 0
    ok = regtool(build, "pull", b, f"{registry.host}/team/bydigest@{p.kv['manifest']}", "d:1")
    assert ok.rc == 0, ok
    wrong = "sha256:" + "0" * 64
    bad = regtool(build, "pull", b, f"{registry.host}/team/bydigest@{wrong}", "d:2")
    assert bad.rc == 1 and bad.errno == "ENOENT", bad


def test_corrupt_blob_in_registry_is_refused_and_leaves_nothing(build, tmp_path, images):
    reg = Registry(tmp_path / "reg")
    try:
        a, b = tmp_path / "A", tmp_path / "B"
        digest = imported(build, a, images["dir"], "bb:c")
        remote = f"{reg.host}/team/corrupt:1"
        assert regtool(build, "push", a, "bb:c", remote).rc == 0
        data = reg.blob_data(digest)
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
        r = regtool(build, "pull", b, remote, "c:1")
        assert r.rc == 1 and r.errno == "EBADMSG", r
        assert "hashes to" in r.err
        assert regtool(build, "inspect", b, "c:1").rc == 1
        assert not blob_path(b, digest).exists()
        assert not any((b / "tmp").iterdir()) if (b / "tmp").exists() else True
    finally:
        reg.stop()


# ---- uploads ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 65536, 65537, 300001])
def test_chunked_upload_round_trip(build, registry, tmp_path, size):
    data = os.urandom(size)
    src = tmp_path / "blob"
    src.write_bytes(data)
    repo = f"{registry.host}/chunks/s{size}"
    put = regtool(build, "blob-put", repo, src, 65536)
    assert put.rc == 0, put
    digest = put.out.strip()
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    # one POST, ceil(size/64k) PATCHes, one PUT (plus a first-contact probe)
    patches = (size + 65535) // 65536
    assert put.stats["requests"] <= 2 + patches + 2, put.stats
    got = regtool(build, "blob-get", repo, digest, tmp_path / "out", size)
    assert got.rc == 0, got
    assert (tmp_path / "out").read_bytes() == data


def test_image_push_chunked(build, images, registry, stores):
    a, b = stores
    digest = imported(build, a, images["dir"], "bb:ch")
    remote = f"{registry.host}/team/chunked:1"
    p = regtool(build, "push", a, "bb:ch", remote, 1 << 20)
    assert p.rc == 0, p
    size = blob_path(a, digest).stat().st_size
    assert p.stats["requests"] >= size // (1 << 20)
    g = regtool(build, "pull", b, remote, "ch:1")
    assert g.rc == 0 and g.kv["digest"] == digest, g


def test_cross_repo_mount_sends_no_bytes(build, registry, tmp_path):
    data = os.urandom(200000)
    src = tmp_path / "blob"
    src.write_bytes(data)
    assert regtool(build, "blob-put", f"{registry.host}/mnt/src", src).rc == 0
    m = regtool(build, "blob-put", f"{registry.host}/mnt/dst", src, 0, "mnt/src")
    assert m.rc == 0, m
    assert m.stats["bytes_out"] == 0
    digest = m.out.strip()
    assert regtool(build, "blob-head", f"{registry.host}/mnt/dst", digest).out.strip() == "200000"


def test_blob_head_absent(build, registry):
    r = regtool(build, "blob-head", f"{registry.host}/none/here", "sha256:" + "1" * 64)
    assert r.rc == 3, r


# ---- Range reads ------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranged(registry, build, tmp_path_factory):
    d = tmp_path_factory.mktemp("ranged")
    data = os.urandom(3 * 1024 * 1024 + 123)
    (d / "blob").write_bytes(data)
    put = regtool(build, "blob-put", f"{registry.host}/ranges/blob", d / "blob")
    assert put.rc == 0, put
    return d / "blob", data, put.out.strip()


@pytest.mark.parametrize("off,length", [(0, 1), (0, 4096), (1000, 65536), (3 * 1024 * 1024, 123),
                                        (3 * 1024 * 1024 + 100, 4096), (12345, 1 << 20)])
def test_range_reads_exact_bytes(build, registry, ranged, tmp_path, off, length):
    path, data, digest = ranged
    r = regtool(build, "blob-range", f"{registry.host}/ranges/blob", digest, off, length,
                tmp_path / "part")
    assert r.rc == 0, r
    want = data[off:off + length]
    assert int(r.out) == len(want)
    assert (tmp_path / "part").read_bytes() == want
    assert r.stats["bytes_in"] == len(want)  # no more was fetched


def test_range_past_end_reads_nothing(build, registry, ranged, tmp_path):
    path, data, digest = ranged
    r = regtool(build, "blob-range", f"{registry.host}/ranges/blob", digest, len(data), 10,
                tmp_path / "part")
    assert r.rc == 0 and r.out.strip() == "0", r


def test_range_reads_from_many_threads(build, registry, ranged):
    path, data, digest = ranged
    r = regtool(build, "range-threads", f"{registry.host}/ranges/blob", digest, path, 8, 25)
    assert r.rc == 0 and r.out.strip() == "ok", r


def test_range_dead_registry_errors_within_timeout(build, tmp_path):
    fake = FakeBlobRegistry(os.urandom(100000), good=2)
    try:
        # first contact (GET /v2/) and one good read, then the registry goes silent
        ok = regtool(build, "--range-timeout-ms", 1500, "blob-range", f"{fake.host}/x/y",
                     fake.digest, 0, 100, tmp_path / "p")
        assert ok.rc == 0 and ok.out.strip() == "100", ok
        dead = regtool(build, "--range-timeout-ms", 1500, "blob-range", f"{fake.host}/x/y",
                       fake.digest, 0, 100, tmp_path / "p", timeout=30)
        assert dead.rc == 1 and dead.errno == "ETIMEDOUT", dead
        assert dead.elapsed < 5, dead.elapsed
    finally:
        fake.stop()


def test_range_registry_stalls_mid_body(build, tmp_path):
    fake = FakeBlobRegistry(os.urandom(100000), drop_after=10)
    try:
        r = regtool(build, "--range-timeout-ms", 1500, "blob-range", f"{fake.host}/x/y",
                    fake.digest, 0, 5000, tmp_path / "p", timeout=30)
        assert r.rc == 1 and r.errno == "ETIMEDOUT", r
        assert r.elapsed < 5
    finally:
        fake.stop()


def test_range_registry_gone(build, registry, tmp_path):
    port_dead = Registry(tmp_path / "gone")
    host = port_dead.host
    port_dead.stop()
    r = regtool(build, "--range-timeout-ms", 2000, "blob-range", f"{host}/x/y",
                "sha256:" + "2" * 64, 0, 10, tmp_path / "p", timeout=30)
    assert r.rc == 1 and r.errno == "ECONNREFUSED", r
    assert r.elapsed < 5


def test_blob_get_resumes_a_broken_transfer(build, tmp_path):
    blob = os.urandom(400000)
    fake = FakeBlobRegistry(blob, cut_first_get=150000)
    try:
        r = regtool(build, "blob-get", f"{fake.host}/x/y", fake.digest, tmp_path / "out",
                    len(blob))
        assert r.rc == 0, r
        assert (tmp_path / "out").read_bytes() == blob
        assert fake.ranges == [None, "bytes=150000-"], fake.ranges
    finally:
        fake.stop()


def test_concurrent_pulls_give_one_image(build, images, registry, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    digest = imported(build, a, images["dir"], "bb:conc")
    remote = f"{registry.host}/team/conc:1"
    assert regtool(build, "push", a, "bb:conc", remote).rc == 0
    tool = str(build / "tests/wr-regtool")
    procs = [subprocess.Popen([tool, "pull", str(b), remote, f"c:{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for i in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert list((b / "blobs/sha256").iterdir()) == [blob_path(b, digest)]
    for i in range(4):
        assert regtool(build, "inspect", b, f"c:{i}").kv["digest"] == digest


def test_range_dead_registry_many_threads_bounded(build, tmp_path):
    """The on-demand loader's case: many threads start reading from a
    registry that accepts connections and never answers."""
    fake = FakeBlobRegistry(os.urandom(100000), good=0)
    (tmp_path / "f").write_bytes(b"x" * 100000)
    try:
        r = regtool(build, "--range-timeout-ms", 1500, "--connect-timeout-ms", 1000,
                    "range-threads", f"{fake.host}/x/y", fake.digest, tmp_path / "f", 8, 1,
                    timeout=60)
        assert r.rc == 1 and "ETIMEDOUT" in r.err, r
        # each read is bounded by its own 1.5 s; queued first-contact probes do not add up
        assert r.elapsed < 8, r.elapsed
    finally:
        fake.stop()


def test_range_ignored_is_refused(build, tmp_path):
    fake = FakeBlobRegistry(os.urandom(50000), ignore_range=True)
    try:
        r = regtool(build, "blob-range", f"{fake.host}/x/y", fake.digest, 10, 10, tmp_path / "p")
        assert r.rc == 1 and r.errno == "ENOTSUP", r
    finally:
        fake.stop()


# ---- auth -------------------------------------------------------------------------


def test_basic_auth_htpasswd(build, images, tmp_path):
    (tmp_path / "htpasswd").write_text(htpasswd_line("alice", "s3cret") + "\n")
    reg = Registry(tmp_path / "reg", auth=["auth:", "  htpasswd:", "    realm: warren-test",
                                            f"    path: {tmp_path / 'htpasswd'}"])
    try:
        a, b = tmp_path / "A", tmp_path / "B"
        digest = imported(build, a, images["dir"], "bb:auth")
        remote = f"{reg.host}/priv/bb:1"
        anon = regtool(build, "push", a, "bb:auth", remote)
        assert anon.rc == 1 and anon.errno == "EACCES" and "credentials" in anon.err, anon
        bad = regtool(build, "--user", "alice", "--password", "nope", "push", a, "bb:auth", remote)
        assert bad.rc == 1 and bad.errno == "EACCES", bad
        ok = regtool(build, "--user", "alice", "--password", "s3cret", "push", a, "bb:auth", remote)
        assert ok.rc == 0, ok
        # a docker-style auth file works too
        auth = {"auths": {reg.host: {"auth": "YWxpY2U6czNjcmV0"}}}  # alice:s3cret
        (tmp_path / "config.json").write_text(json.dumps(auth))
        g = regtool(build, "--auth-file", tmp_path / "config.json", "pull", b, remote, "p:1")
        assert g.rc == 0 and g.kv["digest"] == digest, g
    finally:
        reg.stop()


def test_bearer_token_dance_and_cache(build, images, tmp_path):
    ts = TokenServer(tmp_path / "tok", "bob", "hunter2")
    reg = Registry(tmp_path / "reg", auth=ts.registry_auth())
    try:
        a, b = tmp_path / "A", tmp_path / "B"
        digest = imported(build, a, images["dir"], "bb:tok")
        remote = f"{reg.host}/team/tok:1"
        anon = regtool(build, "push", a, "bb:tok", remote)
        assert anon.rc == 1 and anon.errno == "EACCES", anon
        ts.requests.clear()
        ok = regtool(build, "--user", "bob", "--password", "hunter2", "push", a, "bb:tok", remote)
        assert ok.rc == 0, ok
        # a token per scope, fetched once and then served from the cache (the
        # push token also serves the pull-scope HEADs after it)
        scopes = [s for s, good in ts.requests if good]
        assert sorted(scopes) == [("repository:team/tok:pull",),
                                  ("repository:team/tok:pull,push",)], ts.requests
        ts.requests.clear()
        g = regtool(build, "--user", "bob", "--password", "hunter2", "pull", b, remote, "t:1")
        assert g.rc == 0 and g.kv["digest"] == digest, g
        assert [s for s, good in ts.requests if good] == [("repository:team/tok:pull",)]
        bad = regtool(build, "--user", "bob", "--password", "wrong", "pull", b, remote, "t:2")
        assert bad.rc == 1 and bad.errno == "EACCES", bad
        # range reads with the dance, from many threads: still one token fetch
        ts.requests.clear()
        blob = Path(a) / "blobs/sha256" / digest.split(":")[1]
        r = regtool(build, "--user", "bob", "--password", "hunter2", "range-threads",
                    f"{reg.host}/team/tok", digest, blob, 6, 10)
        assert r.rc == 0, r
        assert len([s for s, good in ts.requests if good]) == 1, ts.requests
    finally:
        reg.stop()
        ts.stop()


# ---- images made by other tools ------------------------------------------------------


def plain_layout(layout):
    """Two layers with a whiteout, and a config with runtime defaults."""
    return image_manifest(layout, [
        [("etc", None), ("etc/hello", b"hello\n"), ("etc/gone", b"x"), ("bin", None),
         ("bin/sh", ("symlink", "busybox"))],
        [("etc", None), ("etc/.wh.gone", b""), ("srv", None), ("srv/app.py", b"print(1)\n")],
    ], env=["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], cmd=["python3", "app.py"], workdir="/srv",
        user="1000:1000")


def check_converted(build, store, ref, tmp_path):
    i = regtool(build, "inspect", store, ref)
    assert i.rc == 0, i
    assert i.kv["env"].split("\x1f") == ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    assert i.kv["cmd"].split("\x1f") == ["python3", "app.py"]
    assert i.kv["workdir"] == "/srv" and i.kv["user"] == "1000:1000"
    out = extract_blob(blob_path(store, i.kv["digest"]), tmp_path / ("x-" + ref.replace(":", "_")))
    assert (out / "etc/hello").read_bytes() == b"hello\n"
    assert not (out / "etc/gone").exists()
    assert (out / "srv/app.py").read_bytes() == b"print(1)\n"
    assert os.readlink(out / "bin/sh") == "busybox"
    return i.kv["digest"]


needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None,
                                  reason="skopeo not installed (scripts/deps.sh)")


def skopeo_copy(src, dst, *extra):
    p = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", *extra, src, dst],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()


@needs_skopeo
@pytest.mark.parametrize("fmt", ["oci", "v2s2"])
def test_image_pushed_by_skopeo_pulls_and_converts(build, registry, tmp_path, fmt):
    layout = tmp_path / "layout"
    oci_layout(layout, "1", plain_layout(layout))
    remote = f"{registry.host}/plain/{fmt}:1"
    skopeo_copy(f"oci:{layout}:1", f"docker://{remote}", "--format", fmt)
    store = tmp_path / "C"
    g = regtool(build, "pull", store, remote, "plain:1")
    assert g.rc == 0, g
    assert g.kv["erofs"] == "0" and g.kv["complete"] == "1"
    assert g.kv["layers"] == "3"  # config + 2 layers
    d = check_converted(build, store, "plain:1", tmp_path)
    again = regtool(build, "pull", store, remote, "plain:2")
    assert again.rc == 0 and again.kv["already"] == "1" and again.kv["digest"] == d, again
    # lazy is impossible for a tar image: it is converted in full, and says so
    lz = regtool(build, "pull", tmp_path / "D", remote, "plain:1", "lazy")
    assert lz.rc == 0 and lz.kv["lazy"] == "0" and lz.kv["complete"] == "1", lz


@needs_skopeo
def test_index_picks_linux_amd64(build, registry, tmp_path):
    layout = tmp_path / "layout"
    arm = image_manifest(layout, [[("etc", None), ("etc/arch", b"arm64\n")]], arch="arm64")
    amd = image_manifest(layout, [[("etc", None), ("etc/arch", b"amd64\n")]], arch="amd64")
    oci_layout(layout, "multi", index_of(layout, [arm, amd]))
    remote = f"{registry.host}/plain/multi:1"
    skopeo_copy(f"oci:{layout}:multi", f"docker://{remote}", "--all")
    m = regtool(build, "manifest-get", remote)
    assert m.out.startswith("application/vnd.oci.image.index.v1+json"), m
    store = tmp_path / "C"
    g = regtool(build, "pull", store, remote, "multi:1")
    assert g.rc == 0, g
    assert g.kv["manifest"] == amd["digest"]
    out = extract_blob(blob_path(store, g.kv["digest"]), tmp_path / "x")
    assert (out / "etc/arch").read_bytes() == b"amd64\n"
    g2 = regtool(build, "pull", tmp_path / "E", remote, "multi:arm", "full", "linux/arm64")
    assert g2.rc == 0 and g2.kv["manifest"] == arm["digest"], g2
    none = regtool(build, "pull", tmp_path / "F", remote, "multi:x", "full", "linux/s390x")
    assert none.rc == 1 and none.errno == "ENOENT" and "platform" in none.err, none


# ---- bad input --------------------------------------------------------------------


@pytest.mark.parametrize("ref,frag", [
    ("python:3.12", "not a registry reference"),
    ("https://127.0.0.1:5000/x", "without a scheme"),
    ("127.0.0.1:5000/UPPER/x", "lowercase"),
    ("127.0.0.1:5000/x:bad tag", "tag"),
    ("127.0.0.1:5000/x@sha256:abc", "64"),
    ("127.0.0.1:99999/x", "bad host"),
    ("127.0.0.1:5000/a/../b", "repository"),
])
def test_bad_remote_refs_are_named(build, tmp_path, ref, frag):
    r = regtool(build, "pull", tmp_path / "S", ref, "x:1")
    assert r.rc == 1 and r.errno == "EINVAL", r
    assert frag in r.err, r


def test_push_of_unknown_image(build, registry, tmp_path):
    r = regtool(build, "push", tmp_path / "S", "nope:1", f"{registry.host}/x/y:1")
    assert r.rc == 1 and r.errno == "ENOENT", r


def test_pull_too_big_for_the_store_fails_before_downloading(build, registry, tmp_path):
    root = tmp_path / "root"
    (root / "data").mkdir(parents=True)
    (root / "data/big").write_bytes(os.urandom(12 << 20))
    a = tmp_path / "A"
    imported(build, a, root, "big:1")
    remote = f"{registry.host}/team/big:1"
    assert regtool(build, "push", a, "big:1", remote).rc == 0
    small = tmp_path / "small"
    small.mkdir()
    # a 6 MiB store filesystem in a private mount namespace (gone with it)
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        f"mount -t tmpfs -o size=6m tmpfs {small} && "
                        f"exec {build / 'tests/wr-regtool'} pull {small}/store {remote} big:1"],
                       capture_output=True, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.startswith("ENOSPC"), err
    assert "does not fit" in err
    assert "bytes_in=" in err and int(err.split("bytes_in=")[1].split()[0]) < 1 << 20
