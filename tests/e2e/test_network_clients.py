"""The network policy from every client (branch netbpf): `warren create
--network/--allow/--domain/--service`, `warren network` (libwarren's
warren_sandbox_network_get/patch underneath), and the Python SDK's
Sandbox.create(network=...), sb.network.get() and sb.network.update(),
sync and async; and the published ports from every client: `warren ports`
(warren_sandbox_port_publish/list/unpublish) and sb.ports, sync and async."""
import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from netnode import HOST_ADDR, HOST_NS, INET_NS, tcp_read, unix_read
from test_cli_client import Cli, one_error_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
from warren import AsyncSandbox, Sandbox  # noqa: E402


def test_cli_create_and_network_verb(svc_daemon):
    cli = Cli(svc_daemon)
    sid = cli("create", "--image", "busybox", "--allow", "10.1.2.0/24:80/tcp",
              "--allow", "[2001:db8::/32]:8000-8100", "--domain", "pypi.org",
              "--service", "pypi", check=0).out.strip()
    try:
        n = cli.json("network", sid)
        assert n["mode"] == "allowlist", n
        assert n["allow"] == [
            {"cidr": "10.1.2.0/24", "ports": "80", "protocol": "tcp"},
            {"cidr": "2001:db8::/32", "ports": "8000-8100", "protocol": "any"}], n
        assert n["domains"] == ["pypi.org"] and n["services"] == ["pypi"]
        n = cli.json("network", sid, "--remove", "10.1.2.0/24:80/tcp", "--allow",
                     "192.0.2.7/udp", "--remove-service", "pypi", "--service", "npm")
        assert n["allow"] == [
            {"cidr": "2001:db8::/32", "ports": "8000-8100", "protocol": "any"},
            {"cidr": "192.0.2.7/32", "ports": "*", "protocol": "udp"}], n
        assert n["services"] == ["npm"]
        p = cli("network", sid, "--mode", "none", "--established", "cut", check=0)
        assert p.out.startswith("mode      none\nestablished cut"), p.out
        one_error_line(cli("network", sid, "--mode", "closed"), "mode")
        one_error_line(cli("network", sid, "--allow", "10.1.2.1/24"), "host bits")
        one_error_line(cli("network", sid, "--allow", "[2001:db8::/32"), "--allow")
        one_error_line(cli("network", sid, "--remove-domain", "absent.org"),
                       "domains_remove[0]")
    finally:
        cli("rm", "-f", sid)
    one_error_line(cli("create", "--image", "busybox", "--network", "half"), "network.mode")
    sid = cli("create", "--image", "busybox", "--network",
              '{"mode": "open"}', check=0).out.strip()
    try:
        assert cli.json("network", sid)["mode"] == "open"
    finally:
        cli("rm", "-f", sid)


def test_sdk_sync(svc_daemon, image):
    conn = {"socket": str(svc_daemon.sock)}
    with Sandbox.create(image=image, timeout=120,
                        network={"mode": "allowlist",
                                 "allow": [{"cidr": "10.0.0.0/8", "ports": "443",
                                            "protocol": "tcp"}]}, **conn) as sb:
        n = sb.network.get()
        assert n["mode"] == "allowlist" and n["enforced"] is True
        n = sb.network.update(allow_add=[{"cidr": "192.0.2.0/24"}], services_add=["pypi"])
        assert [a["cidr"] for a in n["allow"]] == ["10.0.0.0/8", "192.0.2.0/24"]
        assert n["services"] == ["pypi"]
        with pytest.raises(warren.InvalidArgumentError) as e:
            sb.network.update(allow_remove=[{"cidr": "172.16.0.0/12"}])
        assert e.value.field == "allow_remove[0]"
        n = sb.network.update(mode="none", established="cut")
        assert n["mode"] == "none" and n["established"] == "cut"
        r = sb.commands.run("wr-probe connect-tcp 10.1.1.1 443")
        assert "errno=EPERM" in r.stdout, r.stdout
    with pytest.raises(warren.InvalidArgumentError) as e:
        Sandbox.create(image=image, network={"allow": [{"cidr": "10.0.0.1/8"}]}, **conn)
    assert e.value.field == "network.allow[0].cidr"


def test_sdk_async(netd, image):
    conn = {"socket": str(netd.sock)}

    async def main():
        sb = await AsyncSandbox.create(image=image, timeout=120, network={"mode": "open"},
                                       **conn)
        try:
            assert (await sb.network.get())["mode"] == "open"
            n = await sb.network.update(mode="allowlist", domains=["*.pythonhosted.org"])
            assert n["mode"] == "allowlist" and n["domains"] == ["*.pythonhosted.org"]
        finally:
            await sb.kill()
    asyncio.run(main())


# ---- published ports: warren ports, sb.ports (libwarren's warren_sandbox_port_*)

def serve(api, sid, port, text):
    api.run(sid, ["sh", "-c", f"while true; do echo {text} | nc -l -p {port}; done "
                              ">/dev/null 2>&1 &"])
    time.sleep(0.3)


def test_cli_ports(netd, napi):
    cli = Cli(netd)
    sid = napi.create(network={"mode": "open"})
    off = napi.create()
    try:
        serve(napi, sid, 8000, "hello")
        p = cli.json("ports", sid, "--publish", "8000")
        assert p["port"] == 8000 and p["host"] == "127.0.0.1" and p["via"] == "relay", p
        assert tcp_read(HOST_NS, "127.0.0.1", p["host_port"]) == "hello"
        out = cli("ports", sid, "--publish", "8000", "--host", HOST_ADDR, "--host-port",
                  "18100", check=0).out
        assert out == f"8000\t{HOST_ADDR}:18100\tnat\n", out
        assert tcp_read(INET_NS, HOST_ADDR, 18100) == "hello"
        u = cli.json("ports", sid, "--publish", "8000", "--unix")
        assert u["via"] == "relay" and unix_read(u["unix"]) == "hello", u
        lst = cli.json("ports", sid)["ports"]
        assert sorted(x.get("host_port", 0) for x in lst) == sorted([0, p["host_port"], 18100])
        lines = cli("ports", sid, check=0).out.splitlines()
        assert f"8000\t{HOST_ADDR}:18100\tnat" in lines and len(lines) == 3, lines
        # errors: one line, naming the option or the daemon's field
        one_error_line(cli("ports", sid, "--publish", "0"), "--publish")
        one_error_line(cli("ports", sid, "--publish", "80x"), "--publish")
        one_error_line(cli("ports", sid, "--host", HOST_ADDR), "--host", "--publish")
        one_error_line(cli("ports", sid, "--publish", "8000", "--host", "192.0.2.9"), "host")
        one_error_line(cli("ports", sid, "--publish", "8000", "--host", HOST_ADDR,
                           "--host-port", "18100"), "18100")
        one_error_line(cli("ports", off, "--publish", "8000"), off)
        one_error_line(cli("ports", "nosuchsandbox1"), "nosuchsandbox1")
        assert len(cli.json("ports", sid)["ports"]) == 3  # nothing changed
        cli("ports", sid, "--unpublish", "8000", check=0)
        assert cli.json("ports", sid)["ports"] == []
        assert not os.path.exists(u["unix"])
        one_error_line(cli("ports", sid, "--unpublish", "70000"), "--unpublish")
    finally:
        napi.kill(sid)
        napi.kill(off)


def test_sdk_ports_sync(netd, napi):
    sid = napi.create(network={"mode": "open"})
    try:
        serve(napi, sid, 8000, "hello")
        sb = Sandbox.connect(sid, socket=str(netd.sock))
        p = sb.ports.publish(8000, host=HOST_ADDR, host_port=18200)
        assert (p.port, p.host, p.host_port, p.via) == (8000, HOST_ADDR, 18200, "nat"), p
        assert tcp_read(INET_NS, HOST_ADDR, 18200) == "hello"
        u = sb.ports.publish(8000, unix=True)
        assert u.unix and u.host is None and unix_read(u.unix) == "hello"
        assert sorted(x.via for x in sb.ports.list()) == ["nat", "relay"]
        with pytest.raises(warren.ConflictError):
            sb.ports.publish(8000, host=HOST_ADDR, host_port=18200)
        with pytest.raises(warren.InvalidArgumentError) as e:
            sb.ports.publish(8000, host="192.0.2.9")
        assert e.value.field == "host"
        with pytest.raises(TypeError):
            sb.ports.publish("8000")
        sb.ports.unpublish(8000)
        assert sb.ports.list() == []
    finally:
        napi.kill(sid)


def test_sdk_ports_async(netd, napi):
    sid = napi.create(network={"mode": "open"})

    async def main():
        sb = await AsyncSandbox.connect(sid, socket=str(netd.sock))
        p = await sb.ports.publish(8000)
        assert p.host == "127.0.0.1" and p.host_port > 0 and p.via == "relay"
        assert [x.host_port for x in await sb.ports.list()] == [p.host_port]
        await sb.ports.unpublish(8000)
        assert await sb.ports.list() == []
        with pytest.raises(warren.InvalidArgumentError) as e:
            await sb.ports.publish(0)
        assert e.value.field == "port"
        return p.host_port
    try:
        serve(napi, sid, 8000, "hello")
        asyncio.run(main())
    finally:
        napi.kill(sid)
