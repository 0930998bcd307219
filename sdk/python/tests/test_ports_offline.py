"""sb.ports without a daemon: request shapes, answers, typed errors."""
import asyncio
import json

import httpx
import pytest

import warren
from test_offline import err, fake  # noqa: F401 (fake is a fixture)

PUB = {"port": 8000, "host": "127.0.0.1", "host_port": 41234, "via": "relay"}
UNX = {"port": 8000, "unix": "/run/warren/ports/abc-8000.sock", "via": "relay"}


def handler(req):
    if req.method == "POST":
        body = json.loads(req.content)
        if body.get("host") == "192.0.2.9":
            return err(400, "invalid_argument", "host: not an address of this host", "host")
        return httpx.Response(201, json=UNX if body.get("unix") else PUB)
    if req.method == "GET":
        return httpx.Response(200, json={"ports": [PUB, UNX]})
    if req.method == "DELETE":
        return httpx.Response(204)
    return httpx.Response(405)


def test_ports_sync(fake):  # noqa: F811
    rec = fake(handler)
    sb = warren.Sandbox("abc")
    p = sb.ports.publish(8000)
    assert (p.port, p.host, p.host_port, p.unix, p.via) == (8000, "127.0.0.1", 41234, None,
                                                             "relay")
    assert rec.requests[-1].url.path.endswith("/sandboxes/abc/ports")
    assert json.loads(rec.requests[-1].content) == {"port": 8000}
    sb.ports.publish(8000, host="198.18.0.1", host_port=18000)
    assert json.loads(rec.requests[-1].content) == {"port": 8000, "host": "198.18.0.1",
                                                    "host_port": 18000}
    u = sb.ports.publish(8000, unix=True)
    assert json.loads(rec.requests[-1].content) == {"port": 8000, "unix": True}
    assert u.unix == UNX["unix"] and u.host is None and u.host_port is None
    assert [x.via for x in sb.ports.list()] == ["relay", "relay"]
    assert sb.ports.unpublish(8000) is None
    assert rec.requests[-1].method == "DELETE"
    assert rec.requests[-1].url.path.endswith("/sandboxes/abc/ports/8000")
    with pytest.raises(warren.InvalidArgumentError) as e:
        sb.ports.publish(8000, host="192.0.2.9")
    assert e.value.field == "host"
    n = len(rec.requests)
    for bad in ("8000", 80.0, True):
        with pytest.raises(TypeError):
            sb.ports.publish(bad)
        with pytest.raises(TypeError):
            sb.ports.unpublish(bad)
    assert len(rec.requests) == n  # refused before any request


def test_ports_async(fake):  # noqa: F811
    rec = fake(handler)

    async def main():
        sb = warren.AsyncSandbox("abc")
        p = await sb.ports.publish(8000, host_port=41234)
        got = [x.port for x in await sb.ports.list()]
        await sb.ports.unpublish(8000)
        return p, got
    p, got = asyncio.run(main())
    assert p.host_port == 41234 and got == [8000, 8000]
    assert [r.method for r in rec.requests] == ["POST", "GET", "DELETE"]
