"""The node's image store is shared: only admins (the Unix socket, TCP
tenants in admin_tenants) change it; every tenant reads and pulls. And
layers at create through every client: libwarren (warren create --layer),
the Python SDK sync and async."""
import asyncio
import io
import sys
import tarfile
import urllib.parse
from pathlib import Path

import pytest

from test_cli_client import Cli, one_error_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

from warren import AsyncSandbox, Sandbox  # noqa: E402
from warren.exceptions import NotFoundError, PermissionDeniedError  # noqa: E402
from warren.images import Images  # noqa: E402


def q(s):
    return urllib.parse.quote(s, safe="")


def layer_tar(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        d = tarfile.TarInfo("./")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        t.addfile(d)
        for name, data in files.items():
            ti = tarfile.TarInfo("./" + name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def imp(c, files, ref):
    r = c.request("POST", f"/v1/images/import?ref={q(ref)}", body=layer_tar(files))
    assert r.status == 201, r
    return r.json()


def mutations(c, ref):
    """Every mutating image route, as (name, response)."""
    return [
        ("import", c.request("POST", "/v1/images/import?ref=adm-x:1",
                             body=layer_tar({"x": b"x"}))),
        ("tag", c.post(f"/v1/images/{q(ref)}/tag", {"ref": "adm:other"})),
        ("pin", c.post(f"/v1/images/{q(ref)}/pin")),
        ("unpin", c.post(f"/v1/images/{q(ref)}/unpin")),
        ("gc", c.post("/v1/images/gc?dry_run=1")),
        ("push", c.post(f"/v1/images/{q(ref)}/push", {"to": "127.0.0.1:1/a/b:1"})),
        ("rm", c.delete(f"/v1/images/{q(ref)}")),
    ]


def test_image_mutations_need_an_admin(api, alice, warrend):
    img = imp(api, {"adm": b"1"}, "adm:1")
    for name, r in mutations(alice, "adm:1"):
        assert r.status == 403, (name, r)
        assert r.error == ("permission_denied", None), (name, r)
        assert "alice" in r.json()["error"]["message"], r
    # reads (and the pull route's validation) stay open
    assert alice.get("/v1/images/adm:1").json()["digest"] == img["digest"]
    assert alice.get("/v1/images").status == 200
    assert alice.get("/v1/images/events").status == 200
    assert alice.post("/v1/images/pull", {"ref": "nope"}).status == 400
    # and nothing changed
    got = api.get("/v1/images/adm:1").json()
    assert got["refs"] == ["adm:1"] and got["pinned"] is False
    assert api.delete("/v1/images/adm:1").status == 200


def test_admin_tenants_from_config(fresh_daemon):
    node = fresh_daemon(extra={"admin_tenants": ["alice"]}).start()
    a, b, u = node.client("alice"), node.client("bob"), node.client()
    try:
        r = a.request("POST", "/v1/images/import?ref=adm:1", body=layer_tar({"f": b"1"}))
        assert r.status == 201, r
        assert b.post("/v1/images/adm:1/tag", {"ref": "adm:2"}).status == 403
        assert a.post("/v1/images/adm:1/tag", {"ref": "adm:2"}).status == 200
        assert b.post("/v1/images/adm:2/pin").status == 403
        assert a.post("/v1/images/adm:2/pin").json()["pinned"] is True
        assert b.delete("/v1/images/adm:2").status == 403
        assert b.post("/v1/images/gc").status == 403
        # a host path import stays a Unix-socket privilege, admin or not
        r = a.post("/v1/images/import", {"path": "/"})
        assert r.status == 400 and r.error[1] == "path", r
        # the Unix socket is always admin; bob may still use the image
        assert u.post("/v1/images/adm:2/unpin").status == 200
        sid = b.create(image="busybox", layers=["adm:2"])
        assert b.run(sid, ["cat", "/f"])["stdout"] == "1"
        b.kill(sid)
    finally:
        for c in (a, b, u):
            c.close()


@pytest.fixture
def layer_images(api):
    imp(api, {"which": b"a", "only-a": b"A"}, "lay-a:1")
    imp(api, {"which": b"b", "only-b": b"B"}, "lay-b:1")
    yield ["lay-a:1", "lay-b:1"]
    for r in ("lay-a:1", "lay-b:1"):
        api.delete(f"/v1/images/{q(r)}")


def check_stack(run):
    """run(cmd) -> stdout. lay-b sits on lay-a, both on busybox."""
    assert run(["cat", "/which"]) == "b"
    assert run(["cat", "/only-a", "/only-b"]) == "AB"
    assert run(["echo", "base"]) == "base\n"


def test_cli_create_with_layers(warrend, layer_images):
    cli = Cli(warrend)
    args = ["create", "--image", "busybox", "--timeout", "5m"]
    for ref in layer_images:
        args += ["--layer", ref]
    p = cli(*args, check=0)
    sid = p.out.strip()
    try:
        check_stack(lambda cmd: cli("exec", sid, "--", *cmd, check=0).out)
    finally:
        cli("rm", "-f", sid)
    one_error_line(cli("create", "--image", "busybox", "--layer", "nosuch:9"), "layers[0]")
    one_error_line(cli("create", "--image", "busybox", "--pull", "sometimes"), "--pull")
    one_error_line(cli("create", "--image", "busybox", "--layer", ""), "--layer")


def test_sdk_create_with_layers_sync(conn, layer_images):
    with Sandbox.create(image="busybox", layers=layer_images, **conn) as sb:
        check_stack(lambda cmd: sb.commands.run(cmd).stdout)
    with pytest.raises(NotFoundError) as e:
        Sandbox.create(image="busybox", layers=["lay-a:1", "nosuch:9"], **conn)
    assert e.value.field == "layers[1]"
    with pytest.raises(TypeError):
        Sandbox.create(image="busybox", layers="lay-a:1", **conn)


def test_sdk_create_with_layers_async(conn, layer_images):
    async def main():
        sb = await AsyncSandbox.create(image="busybox", layers=layer_images, pull="never",
                                       **conn)
        try:
            out = []
            for cmd in (["cat", "/which"], ["cat", "/only-a", "/only-b"]):
                out.append((await sb.commands.run(cmd)).stdout)
            assert out == ["b", "AB"]
        finally:
            await sb.kill()
    asyncio.run(main())


def test_sdk_image_mutation_by_a_tenant_is_permission_denied(tenants, conn):
    alice_kw, _ = tenants
    with pytest.raises(PermissionDeniedError) as e:
        Images(**alice_kw).gc(dry_run=True)
    assert e.value.status == 403
    assert Images(**conn).gc(dry_run=True)["dry_run"] is True
    assert isinstance(Images(**alice_kw).list(), list)


def test_cli_image_mutation_by_a_tenant_is_one_error_line(warrend):
    cli = Cli(warrend)
    env = {k: v for k, v in cli.env.items() if k != "WARREN_SOCKET"}
    env.update(WARREN_URL=f"http://127.0.0.1:{warrend.port}",
               WARREN_TOKEN=warrend.tokens["bob"])
    one_error_line(cli("image", "gc", "--dry-run", env=env), "admin")
    assert cli("image", "ls", env=env).returncode == 0
