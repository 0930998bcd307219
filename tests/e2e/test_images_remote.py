"""Sandboxes created from registry references (issue 4): a fresh node pulls
the reference once (lazily when it carries warren's EROFS layer), concurrent
creates share one pull, a second create uses the store image without
registry traffic; registry errors name `image`; lazyfs's fetch failures
become image events; the "lazy" config object is validated."""
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from lazy_util import CountingProxy, lazytool  # noqa: E402
from registry_util import (Registry, TokenServer, free_port, image_manifest,  # noqa: E402
                           oci_layout)
from test_cli_client import Cli, one_error_line  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


def q(s):
    return urllib.parse.quote(s, safe="")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


@pytest.fixture
def proxy(registry):
    p = CountingProxy(registry.port)
    yield p
    p.close()


def push(api, path, local, remote):
    r = api.post("/v1/images/import", {"path": str(path), "ref": local})
    assert r.status == 201, r
    p = api.post(f"/v1/images/{q(local)}/push", {"to": remote})
    assert p.status == 200, p
    return r.json()


def events(c, since=0):
    r = c.get(f"/v1/images/events?since={since}&limit=1000")
    assert r.status == 200, r
    return r.json()["events"]


def stop_lazyfs(build, node):
    lazytool(build, node.state / "images", node.run, "stop", check=False)


def test_create_pulls_a_registry_ref_once(api, warrend, registry, proxy, fresh_daemon, build):
    img = push(api, warrend.images / "busybox", "cr:1", f"{registry.host}/team/cr:1")
    node = fresh_daemon(extra={"lazy": {"chunk_size": "256K", "fetch_all": False}}).start()
    c = node.client()
    ref = f"{proxy.host}/team/cr:1"
    sids = []
    try:
        # three creates of the missing reference at once: one pull
        out, threads = [], []
        for _ in range(3):
            t = threading.Thread(target=lambda: out.append(c.__class__(node).post(
                "/v1/sandboxes", {"image": ref, "timeout": 300})))
            threads.append(t)
            t.start()
        for t in threads:
            t.join()
        assert [r.status for r in out] == [201] * 3, out
        sids += [r.json()["id"] for r in out]
        pulled = [e for e in events(c) if e["type"] == "image_pulled"]
        assert len(pulled) == 1, pulled
        assert pulled[0]["detail"]["ref"] == ref and pulled[0]["detail"]["lazy"] is True
        assert pulled[0]["detail"]["digest"] == img["digest"]
        # the store names it by the reference; the blob is served by lazyfs
        got = c.get(f"/v1/images/-?ref={q(ref)}")
        assert got.status == 200, got
        assert got.json()["digest"] == img["digest"] and ref in got.json()["refs"]
        assert c.run(sids[0], ["echo", "pulled"])["stdout"] == "pulled\n"
        # a second create finds the store image: the registry is not asked
        # (lazyfs may still fetch chunks of the blob it serves, which is not
        # a pull)
        asked = len(proxy.manifest_requests())
        sid = c.create(image=ref)
        sids.append(sid)
        assert c.run(sid, ["echo", "again"])["stdout"] == "again\n"
        assert len(proxy.manifest_requests()) == asked
        assert len([e for e in events(c) if e["type"] == "image_pulled"]) == 1
        # pull "always" asks the registry again (same manifest: no blobs)
        sid = c.create(image=ref, pull="always")
        sids.append(sid)
        assert len(proxy.manifest_requests()) > asked
        # a digest reference gets its own store name and works as well
        mdig = pulled[0]["detail"]["manifest_digest"]
        sids.append(c.create(image=f"{proxy.host}/team/cr@{mdig}"))
        assert c.get(f"/v1/images/-?ref={q(f'{proxy.host}/team/cr:sha256-{mdig[7:]}')}"
                     ).status == 200
    finally:
        for s in sids:
            c.kill(s)
        c.close()
        node.finish()
        stop_lazyfs(build, node)


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo not installed")
def test_plain_oci_layer_from_a_registry_is_converted(registry, fresh_daemon, tmp_path):
    # An image of plain tar layers (pushed by skopeo) cannot be lazy: the
    # create pulls it in full, converts it, and stacks it on busybox.
    layout = tmp_path / "layout"
    oci_layout(layout, "1", image_manifest(layout, [[("etc", None), ("etc/plain.txt",
                                                                     b"converted\n")]]))
    remote = f"{registry.host}/plain/layer:1"
    p = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", f"oci:{layout}:1",
                        f"docker://{remote}"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    node = fresh_daemon().start()
    c = node.client()
    try:
        r = c.post("/v1/sandboxes", {"image": "busybox", "layers": []})
        assert r.status == 400 and r.error[1] == "layers", r
        sid = c.create(image="busybox", layers=[remote])
        try:
            assert c.run(sid, ["cat", "/etc/plain.txt"])["stdout"] == "converted\n"
        finally:
            c.kill(sid)
        pulled = [e["detail"] for e in events(c) if e["type"] == "image_pulled"]
        assert len(pulled) == 1 and pulled[0]["lazy"] is False, pulled
        img = c.get(f"/v1/images/-?ref={q(remote)}").json()
        assert img["complete"] is True
    finally:
        c.close()


def test_create_registry_errors_name_image(api, warrend, registry, fresh_daemon):
    node = fresh_daemon().start()
    c = node.client()
    try:
        dead = f"127.0.0.1:{free_port()}/team/x:1"
        r = c.post("/v1/sandboxes", {"image": dead})
        assert r.status == 503, r
        assert r.error == ("unavailable", "image"), r
        # concurrent creates of a dead reference share the failure
        out, ts = [], []
        for _ in range(3):
            ts.append(threading.Thread(target=lambda: out.append(
                c.__class__(node).post("/v1/sandboxes", {"image": dead}).error)))
            ts[-1].start()
        for t in ts:
            t.join()
        assert out == [("unavailable", "image")] * 3, out
        r = c.post("/v1/sandboxes", {"image": f"{registry.host}/team/nosuch:1"})
        assert r.status == 404, r
        assert r.error[1] == "image", r
        r = c.post("/v1/sandboxes", {"image": f"{registry.host}/team/x:1", "pull": "never"})
        assert r.status == 404 and r.error[1] == "image", r
        r = c.post("/v1/sandboxes", {"image": f"{registry.host}/team/x:1", "pull": "sometimes"})
        assert r.status == 400 and r.error[1] == "pull", r
        r = c.post("/v1/sandboxes", {"image": f"{registry.host}/team/x:1",
                                     "registry_auth": "secret"})
        assert r.status == 400 and r.error[1] == "registry_auth", r
        r = c.post("/v1/sandboxes", {"image": f"{registry.host}/team/x:1",
                                     "registry_auth": {"username": "u"}})
        assert r.status == 400 and r.error[1] == "registry_auth", r
        r = c.post("/v1/sandboxes", {"image": "busybox",
                                     "layers": [f"127.0.0.1:{free_port()}/a/b:1"]})
        assert r.status == 503 and r.error[1] == "layers[0]", r
        # credentials never reach the log
        c.post("/v1/sandboxes", {"image": f"{registry.host}/team/nosuch:2",
                                 "registry_auth": {"username": "u", "password": "pw-s3cret"}})
        assert "pw-s3cret" not in node.log_text()
    finally:
        c.close()


def test_lazyfs_fetch_failure_is_an_image_event(api, warrend, registry, proxy, fresh_daemon,
                                                build, tmp_path):
    root = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(root)], check=True)
    (root / "ballast").mkdir()
    for i in range(8):
        (root / "ballast" / f"b{i}").write_bytes(os.urandom(1 << 20))
    img = push(api, root, "ev:1", f"{registry.host}/team/ev:1")
    # connect_timeout_ms covers the TLS handshake of lazyfs's first-contact
    # probe (https, then http for loopback) through the Python proxy: on a
    # loaded machine that took over 1 s and the create's first read failed.
    # The failure below is a refused connection, so the bound costs nothing.
    node = fresh_daemon(extra={"lazy": {"chunk_size": 65536, "connect_timeout_ms": 5000,
                                        "range_timeout_ms": 3000, "retries": 1}}).start()
    c = node.client()
    sid = None
    try:
        sid = c.create(image=f"{proxy.host}/team/ev:1")
        assert c.run(sid, ["cat", "/etc/passwd"])["exit_code"] == 0
        # the registry goes away in the middle of the sandbox's reads
        target = proxy.target
        proxy.target = ("127.0.0.1", free_port())
        with proxy.lock:  # and the kept-alive connections drop
            for so in proxy.socks:
                try:
                    so.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        try:
            out = c.run(sid, ["sh", "-c", "cat /ballast/b5 > /dev/null"])
            assert out["exit_code"] != 0, out
        finally:
            proxy.target = target
        deadline = time.time() + 20
        failed = []
        while time.time() < deadline and not failed:
            failed = [e for e in events(c) if e["type"] == "fetch_failed"]
            time.sleep(0.2)
        assert failed, events(c)
        d = failed[0]["detail"]
        assert d["source"] == "lazyfs" and d["digest"] == img["digest"] and d["message"]
        assert "lazyfs fetch_failed" in node.log_text()
        # a restarted warrend does not record the same lazyfs event twice;
        # lazyfs may still report failures of reads in flight: count once
        # the reports have stopped coming
        n, quiet_since = len(failed), time.time()
        while time.time() - quiet_since < 2 and time.time() < deadline + 20:
            time.sleep(0.2)
            now = len([e for e in events(c) if e["type"] == "fetch_failed"])
            if now != n:
                n, quiet_since = now, time.time()
        node.stop()
        node.start()
        c.close()
        c = node.client()
        time.sleep(1.5)
        assert len([e for e in events(c) if e["type"] == "fetch_failed"]) == n
        # the registry is back: the same read works
        assert c.run(sid, ["sh", "-c", "wc -c < /ballast/b5"])["stdout"].strip() == \
            str(1 << 20)
    finally:
        if sid:
            c.kill(sid)
        c.close()
        node.finish()
        stop_lazyfs(build, node)


def test_corrupted_chunk_is_an_image_event_and_not_kept(api, warrend, registry, proxy,
                                                       fresh_daemon, build, tmp_path):
    """Bytes changed between the registry and lazyfs: the sandbox's read
    fails (EIO), the node records chunk_verify_failed, and once the bytes
    are right again the same read works (the bad chunk was never cached)."""
    root = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(root)], check=True)
    (root / "ballast").mkdir()
    for i in range(8):
        (root / "ballast" / f"b{i}").write_bytes(os.urandom(1 << 20))
    img = push(api, root, "cv:1", f"{registry.host}/team/cv:1")
    node = fresh_daemon(extra={"lazy": {"chunk_size": 65536, "retries": 1}}).start()
    c = node.client()
    sid = None
    try:
        sid = c.create(image=f"{proxy.host}/team/cv:1")
        assert c.run(sid, ["cat", "/etc/passwd"])["exit_code"] == 0
        proxy.corrupt(img["digest"], 0, 1 << 40)  # every Range answer from now on
        out = c.run(sid, ["sh", "-c", "cat /ballast/b5 > /dev/null"])
        assert out["exit_code"] != 0, out
        assert proxy.corrupted > 0
        deadline = time.time() + 20
        bad = []
        while time.time() < deadline and not bad:
            bad = [e for e in events(c) if e["type"] == "chunk_verify_failed"]
            time.sleep(0.2)
        assert bad, events(c)
        d = bad[0]["detail"]
        assert d["source"] == "lazyfs" and d["digest"] == img["digest"]
        assert "chunk index" in d["message"], d
        proxy.corrupt(None)
        want = hashlib.sha256((root / "ballast/b5").read_bytes()).hexdigest()
        got = c.run(sid, ["sha256sum", "/ballast/b5"])["stdout"].split()[0]
        assert got == want
    finally:
        if sid:
            c.kill(sid)
        c.close()
        node.finish()
        stop_lazyfs(build, node)


def test_image_without_chunk_index_is_pulled_in_full(warrend, registry, fresh_daemon, build,
                                                     tmp_path):
    """Pushed by a warren without chunk indexes: a create pulls it in full
    (verified as a whole) rather than serving unverified ranges."""
    store = tmp_path / "pusher"
    env = dict(os.environ, WR_PUSH_WITHOUT_CHUNK_INDEX="1")
    tool = str(Path(build) / "tests/wr-regtool")
    subprocess.run([tool, "import", str(store), str(warrend.images / "busybox"), "old:1"],
                   check=True, capture_output=True)
    remote = f"{registry.host}/team/noindex:1"
    subprocess.run([tool, "push", str(store), "old:1", remote], check=True,
                   capture_output=True, env=env)
    node = fresh_daemon().start()
    c = node.client()
    sid = None
    try:
        sid = c.create(image=remote)
        assert c.run(sid, ["echo", "full"])["stdout"] == "full\n"
        pulled = [e for e in events(c) if e["type"] == "image_pulled"]
        assert len(pulled) == 1, pulled
        d = pulled[0]["detail"]
        assert d["lazy"] is False and d["no_chunk_index"] is True, d
        assert "no chunk index" in node.log_text()
        # the pull route says so too
        r = c.post("/v1/images/pull", {"ref": remote, "as": "old:2", "lazy": True})
        assert r.status == 200, r
        assert r.json()["pull"]["no_chunk_index"] is True and r.json()["complete"] is True
    finally:
        if sid:
            c.kill(sid)
        c.close()
        node.finish()
        stop_lazyfs(build, node)


def test_create_with_registry_credentials(api, warrend, fresh_daemon, tmp_path):
    ts = TokenServer(tmp_path / "tok", "carol", "pw-c4rol")
    reg = Registry(tmp_path / "reg", auth=ts.registry_auth())
    node = None
    try:
        r = api.post("/v1/images/import", {"path": str(warrend.images / "busybox"),
                                           "ref": "sec:1"})
        assert r.status == 201, r
        remote = f"{reg.host}/sec/bb:1"
        assert api.post(f"/v1/images/{q('sec:1')}/push",
                        {"to": remote, "auth": {"username": "carol",
                                                "password": "pw-c4rol"}}).status == 200
        node = fresh_daemon().start()
        c = node.client()
        r = c.post("/v1/sandboxes", {"image": remote})
        assert r.status == 400 and r.error[1] == "registry_auth", r
        r = c.post("/v1/sandboxes", {"image": remote,
                                     "registry_auth": {"username": "carol", "password": "x"}})
        assert r.status == 400 and r.error[1] == "registry_auth", r
        c.close()
        cli = Cli(node)
        one_error_line(cli("create", "--image", remote, "--registry-user", "carol"),
                       "--registry-password-stdin")
        p = cli("create", "--image", remote, "--registry-user", "carol",
                "--registry-password-stdin", input=b"pw-c4rol\n", check=0)
        sid = p.out.strip()
        try:
            # request credentials: fetched in full (lazyfs could not use them)
            assert cli("exec", sid, "--", "echo", "private", check=0).out == "private\n"
            img = cli.json("image", "inspect", remote)
            assert img["complete"] is True
        finally:
            cli("rm", "-f", sid)
        assert "pw-c4rol" not in node.log_text()
    finally:
        if node:
            node.finish()
        reg.stop()
        ts.stop()


def test_tenant_pulls_add_names_but_never_move_them(api, alice, warrend, registry, tmp_path):
    bb = push(api, warrend.images / "busybox", "mv:bb", f"{registry.host}/team/mv:1")
    other = tmp_path / "other"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(other)], check=True)
    (other / "marker").write_text("other\n")
    push(api, other, "mv:other", f"{registry.host}/team/mv:2")
    remote1 = f"{registry.host}/team/mv:1"
    # a new name: fine; the same name again for the same image: fine
    r = alice.post("/v1/images/pull", {"ref": remote1, "as": "alice-mv:1"})
    assert r.status == 200 and r.json()["digest"] == bb["digest"], r
    r = alice.post("/v1/images/pull", {"ref": remote1, "as": "mv:bb"})
    assert r.status == 200 and "mv:bb" in r.json()["refs"], r
    # moving an existing name to another image: refused, the name stays
    r = alice.post("/v1/images/pull", {"ref": f"{registry.host}/team/mv:2", "as": "mv:bb"})
    assert r.status == 403 and r.error == ("permission_denied", "as"), r
    assert api.get("/v1/images/mv:bb").json()["digest"] == bb["digest"]
    # nor may a tenant claim another registry reference's create-time name
    r = alice.post("/v1/images/pull", {"ref": f"{registry.host}/team/mv:2",
                                       "as": f"{registry.host}/team/mv:1"})
    assert r.status == 403 and r.error == ("permission_denied", "as"), r
    r = alice.post("/v1/images/pull", {"ref": remote1, "as": remote1})
    assert r.status == 200, r
    # the Unix socket (an admin) may move names
    r = api.post("/v1/images/pull", {"ref": f"{registry.host}/team/mv:2", "as": "mv:bb"})
    assert r.status == 200 and r.json()["digest"] != bb["digest"], r
    for n in ("mv:bb", "mv:other", "alice-mv:1", remote1):
        api.delete(f"/v1/images/{q(n)}" if "/" not in n else f"/v1/images/-?ref={q(n)}")
