"""Registry push and pull through warrend (POST /v1/images/pull and
POST /v1/images/{ref}/push) against Debian's docker-registry on loopback:
an image imported on one daemon, pushed, pulled by a second daemon (its own
state dir and store) and run there."""
import os
import sys
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from registry_util import Registry, TokenServer  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


def q(s):
    return urllib.parse.quote(s, safe="")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


def imp_path(api, path, ref):
    r = api.post("/v1/images/import", {"path": str(path), "ref": ref})
    assert r.status == 201, r
    return r.json()


def test_push_then_pull_on_a_second_node_and_run(api, warrend, registry, fresh_daemon):
    img = imp_path(api, warrend.images / "busybox", "reg:1")
    remote = f"{registry.host}/team/busybox:1"
    p = api.post(f"/v1/images/{q('reg:1')}/push", {"to": remote})
    assert p.status == 200, p
    pj = p.json()
    assert pj["digest"] == img["digest"] and pj["blobs_sent"] == 3  # config, chunk index, EROFS
    again = api.post(f"/v1/images/{q('reg:1')}/push", {"to": remote}).json()
    assert again["blobs_sent"] == 0 and again["manifest_digest"] == pj["manifest_digest"]

    node2 = fresh_daemon().start()
    c2 = node2.client()
    try:
        g = c2.post("/v1/images/pull", {"ref": remote})
        assert g.status == 200, g
        gj = g.json()
        assert gj["digest"] == img["digest"] and gj["complete"] is True
        assert gj["refs"] == ["team/busybox:1"]  # the default local name
        assert gj["pull"]["erofs"] is True and gj["pull"]["already"] is False
        assert gj["source"] == f"registry:{registry.host}/team/busybox@{pj['manifest_digest']}"
        g2 = c2.post("/v1/images/pull", {"ref": remote, "as": "bb:pulled"}).json()
        assert g2["pull"]["already"] is True and g2["pull"]["bytes_fetched"] == 0
        sid = c2.create(image="bb:pulled")
        try:
            assert c2.run(sid, ["echo", "from-the-registry"])["stdout"] == "from-the-registry\n"
        finally:
            c2.kill(sid)
        lz = c2.post("/v1/images/pull", {"ref": remote, "as": "bb:lazy", "lazy": True}).json()
        assert lz["digest"] == img["digest"] and lz["pull"]["already"] is True
        # a lazy pull of an image node 2 lacks records it without its blob
        other = imp_path(api, warrend.images / "busybox.erofs", "reg:blob")
        remote2 = f"{registry.host}/team/other:1"
        assert api.post(f"/v1/images/{q('reg:blob')}/push", {"to": remote2}).status == 200
        lz2 = c2.post("/v1/images/pull", {"ref": remote2, "lazy": True})
        assert lz2.status == 200, lz2
        l2 = lz2.json()
        assert l2["complete"] is False and l2["pull"]["lazy"] is True
        assert l2["digest"] == other["digest"]
        assert l2["remote"]["reference"].startswith(f"{registry.host}/team/other@sha256:")
        assert l2["pull"]["bytes_fetched"] < l2["size"]
        # pushing an image that is not local is refused
        r = c2.post(f"/v1/images/{q(other['digest'])}/push", {"to": remote2})
        assert r.status == 409, r
    finally:
        c2.close()


def test_pull_with_bearer_auth(api, warrend, tmp_path):
    ts = TokenServer(tmp_path / "tok", "carol", "pw")
    reg = Registry(tmp_path / "reg", auth=ts.registry_auth())
    try:
        imp_path(api, warrend.images / "busybox", "auth:1")
        remote = f"{reg.host}/sec/bb:1"
        denied = api.post(f"/v1/images/{q('auth:1')}/push", {"to": remote})
        assert denied.status == 400 and denied.error[1] == "auth", denied
        ok = api.post(f"/v1/images/{q('auth:1')}/push",
                      {"to": remote, "auth": {"username": "carol", "password": "pw"}})
        assert ok.status == 200, ok
        wrong = api.post("/v1/images/pull", {"ref": remote, "as": "sec:1",
                                             "auth": {"username": "carol", "password": "x"}})
        assert wrong.status == 400 and wrong.error[1] == "auth", wrong
        g = api.post("/v1/images/pull", {"ref": remote, "as": "sec:1",
                                         "auth": {"username": "carol", "password": "pw"}})
        assert g.status == 200, g
        # the password is nowhere in the daemon's log
        assert "pw\"" not in warrend.log_text() and "carol:pw" not in warrend.log_text()
    finally:
        reg.stop()
        ts.stop()


@pytest.mark.parametrize("body,field", [
    ({}, "ref"),
    ({"ref": 5}, "ref"),
    ({"ref": "python:3.12"}, "ref"),
    ({"ref": "127.0.0.1:1/x", "as": "Bad Name"}, "as"),
    ({"ref": "127.0.0.1:1/x", "lazy": "yes"}, "lazy"),
    ({"ref": "127.0.0.1:1/x", "auth": "secret"}, "auth"),
    ({"ref": "127.0.0.1:1/x", "auth": {"username": "u"}}, "auth"),
    ({"ref": "127.0.0.1:1/x", "auth": {"user": "u"}}, "auth"),
    ({"ref": "127.0.0.1:1/x", "bogus": 1}, "bogus"),
])
def test_pull_validation(api, body, field):
    r = api.post("/v1/images/pull", body)
    assert r.status == 400, r
    assert r.error[1] == field, r


def test_pull_errors_from_the_registry(api, registry, tmp_path):
    missing = api.post("/v1/images/pull", {"ref": f"{registry.host}/no/such:1"})
    assert missing.status == 404 and missing.error[1] == "ref", missing
    dead = Registry(tmp_path / "dead")
    host = dead.host
    dead.stop()
    down = api.post("/v1/images/pull", {"ref": f"{host}/x/y:1"})
    assert down.status == 503, down
    assert "connect" in down.json()["error"]["message"].lower()


def test_push_validation(api, registry):
    r = api.post(f"/v1/images/{q('none:1')}/push", {"to": f"{registry.host}/x/y:1"})
    assert r.status == 404, r
    r = api.post(f"/v1/images/{q('none:1')}/push", {})
    assert r.status == 400 and r.error[1] == "to", r
    r = api.post(f"/v1/images/{q('none:1')}/push", {"to": "not-a-registry/x"})
    assert r.status == 400 and r.error[1] == "to", r
    r = api.post(f"/v1/images/{q('none:1')}/push", {"to": f"{registry.host}/x", "chunk_size": -1})
    assert r.status == 400 and r.error[1] == "chunk_size", r
