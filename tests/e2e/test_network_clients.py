"""The network policy from every client (branch netbpf): `warren create
--network/--allow/--domain/--service`, `warren network` (libwarren's
warren_sandbox_network_get/patch underneath), and the Python SDK's
Sandbox.create(network=...), sb.network.get() and sb.network.update(),
sync and async."""
import asyncio
import sys
from pathlib import Path

import pytest

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
