"""`warren image push|pull` (through libwarren) and the Python SDK's
Images.pull/push and warren.registry, against the real warrend of
conftest.py and Debian's docker-registry on loopback."""
import asyncio
import os
import sys
from pathlib import Path

import pytest

from test_cli_client import Cli, one_error_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

from registry_util import Registry, TokenServer  # noqa: E402
from warren import Sandbox  # noqa: E402
from warren import registry as wregistry  # noqa: E402
from warren.exceptions import InvalidArgumentError, NotFoundError  # noqa: E402
from warren.images import AsyncImages, Images  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


def test_cli_push_pull(cli, warrend, registry):
    img = cli.json("image", "import", "--ref", "clireg/bb:1", str(warrend.images / "busybox"))
    remote = f"{registry.host}/cli/bb:1"
    rep = cli.json("image", "push", "clireg/bb:1", remote)  # a name with '/' travels as ?ref=
    assert rep["digest"] == img["digest"] and rep["to"] == remote
    p = cli("image", "push", "clireg/bb:1", remote, check=0)
    assert p.out.strip() == remote
    got = cli.json("image", "pull", "--as", "clipulled:1", remote)
    assert got["digest"] == img["digest"] and "clipulled:1" in got["refs"]
    assert got["pull"]["already"] is True
    p = cli("image", "pull", remote, check=0)
    assert p.out.strip() == img["digest"]
    assert "cli/bb:1" in cli.json("image", "inspect", "cli/bb:1")["refs"]
    one_error_line(cli("image", "pull", "python:3.12"), "not a registry reference")
    one_error_line(cli("image", "pull", f"{registry.host}/no/such:1"), "MANIFEST_UNKNOWN")
    one_error_line(cli("image", "push", "clireg/bb:1"), "push")
    one_error_line(cli("image", "pull", "--user", "u", remote), "--password-stdin")
    one_error_line(cli("image", "push", "--lazy", "clireg/bb:1", remote), "--lazy")
    one_error_line(cli("image", "pull", "--chunk-size", "x", remote), "--chunk-size")
    assert "pull REMOTE" in cli("image", "--help", check=0).out
    assert "--password-stdin" in cli("image", "pull", "--help", check=0).out


def test_cli_credentials_from_stdin(cli, warrend, tmp_path):
    ts = TokenServer(tmp_path / "tok", "dave", "s3cr3t")
    reg = Registry(tmp_path / "reg", auth=ts.registry_auth())
    try:
        cli.json("image", "import", "--ref", "creds:1", str(warrend.images / "busybox"))
        remote = f"{reg.host}/creds/bb:1"
        one_error_line(cli("image", "push", "creds:1", remote), "requires credentials")
        p = cli("image", "push", "--user", "dave", "--password-stdin", "creds:1", remote,
                input=b"s3cr3t\n", check=0)
        assert p.out.strip() == remote
        one_error_line(cli("image", "pull", "--user", "dave", "--password-stdin", remote,
                           input=b"wrong\n"), "token")
        got = cli.json("image", "pull", "--user", "dave", "--password-stdin", "--as", "creds:2",
                       remote, input=b"s3cr3t\n")
        assert "creds:2" in got["refs"]
        one_error_line(cli("image", "pull", "--token-stdin", remote, input=b""), "stdin")
    finally:
        reg.stop()
        ts.stop()


def test_sdk_push_pull(warrend, registry):
    imgs = Images(socket=str(warrend.sock))
    img = imgs.import_(warrend.images / "busybox", ref="sdkreg:1")
    remote = f"{registry.host}/sdk/bb:1"
    rep = imgs.push("sdkreg:1", remote, chunk_size=1 << 20)
    assert rep["digest"] == img.digest and rep["manifest_digest"].startswith("sha256:")
    got = imgs.pull(remote, name="sdkpulled:1")
    assert got.digest == img.digest and "sdkpulled:1" in got.refs
    assert got.raw["pull"]["already"] is True
    got2 = wregistry.pull(remote, name="sdkpulled:2", socket=str(warrend.sock))
    assert got2.digest == img.digest
    with pytest.raises(InvalidArgumentError) as e:
        imgs.pull("python:3.12")
    assert "registry reference" in str(e.value)
    with pytest.raises(NotFoundError):
        imgs.push("sdk-none:1", remote)
    with pytest.raises(ValueError):
        imgs.pull(remote, username="u")

    async def run():
        a = AsyncImages(socket=str(warrend.sock))
        r = await a.push("sdkreg:1", f"{registry.host}/sdk/async:1")
        g = await a.pull(f"{registry.host}/sdk/async:1", name="sdkasync:1")
        return r, g

    r, g = asyncio.run(run())
    assert r["digest"] == img.digest and g.digest == img.digest
    # Sandbox.create takes a registry reference and pulls it when missing
    # (issue 4): pushed under a new name, so the store has no such name yet
    remote2 = f"{registry.host}/sdk/create:1"
    imgs.push("sdkreg:1", remote2)
    assert remote2 not in {ref for i in imgs.list() for ref in i.refs}
    with Sandbox.create(image=remote2, socket=str(warrend.sock), timeout=120) as sb:
        assert sb.commands.run(["echo", "pulled"]).stdout == "pulled\n"
    got3 = imgs.get(remote2)
    assert got3.digest == img.digest and remote2 in got3.refs
