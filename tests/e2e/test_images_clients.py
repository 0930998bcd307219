"""`warren image ...` (through libwarren) and the Python SDK's warren.images,
against the real warrend of conftest.py."""
import asyncio
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from test_cli_client import Cli, one_error_line
from test_images import tar_of, tar_of_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
from warren import Sandbox  # noqa: E402
from warren.images import AsyncImages, Images  # noqa: E402


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


def test_cli_image_verbs(cli, warrend, tmp_path):
    tarball = tmp_path / "bb.tar"
    tarball.write_bytes(tar_of_dir(warrend.images / "busybox"))
    img = cli.json("image", "import", "--ref", "cli/bb:1", str(tarball))
    digest = img["digest"]
    assert "cli/bb:1" in img["refs"]
    # stdin and a node directory give the same digest
    p = cli("image", "import", "--ref", "cli-stdin", "-", input=tarball.read_bytes(), check=0)
    assert p.out.strip() == digest
    p = cli("image", "import", str(warrend.images / "busybox"), check=0)
    assert p.out.strip() == digest
    ls = cli("image", "ls", check=0).out
    assert "cli/bb:1" in ls and "cli-stdin:latest" in ls and digest[:19] in ls
    assert cli.json("image", "inspect", "cli/bb:1")["digest"] == digest
    assert "cli/bb:2" in cli.json("image", "tag", "cli/bb:1", "cli/bb:2")["refs"]
    assert cli.json("image", "pin", digest[:20])["pinned"] is True
    one_error_line(cli("image", "rm", digest), "pinned")
    assert cli.json("image", "unpin", "cli/bb:2")["pinned"] is False
    # a sandbox from the store ref, through the CLI
    sid = cli("create", "--image", "cli/bb:2", "--timeout", "5m", check=0).out.strip()
    try:
        assert cli("exec", sid, "--", "echo", "store", check=0).out == "store\n"
        one_error_line(cli("image", "rm", "--force", digest), "in use")
    finally:
        cli("rm", "-f", sid)
    rep = cli.json("image", "gc", "--dry-run")
    assert rep["dry_run"] is True
    one_error_line(cli("image", "inspect", "nosuch:1"), "no such image")
    one_error_line(cli("image", "tag", "cli/bb:1", "Bad Name"), "ref")
    one_error_line(cli("image", "frobnicate"), "unknown image command")
    one_error_line(cli("image", "import", str(tmp_path / "missing.tar")), "missing.tar")
    p = cli("image", "rm", "cli-stdin", check=0)
    assert "cli-stdin" in p.out


def test_sdk_images_sync(conn, warrend):
    imgs = Images(**conn)
    body = tar_of_dir(warrend.images / "busybox")
    img = imgs.import_(body, ref="sdk:1")
    assert img.digest.startswith("sha256:") and "sdk:1" in img.refs
    assert imgs.import_(io.BytesIO(body), ref="sdk:2").digest == img.digest
    assert imgs.import_(str(warrend.images / "busybox")).digest == img.digest
    assert imgs.get("sdk:1").size == img.size
    assert "team/sdk:3" in imgs.tag("sdk:1", "team/sdk:3").refs
    assert imgs.get("team/sdk:3").digest == img.digest
    assert any(i.digest == img.digest for i in imgs.list())
    assert warren.images.get("sdk:2", **conn).digest == img.digest
    with Sandbox.create(image="team/sdk:3", timeout=120, **conn) as sb:
        assert sb.commands.run("echo via-sdk").stdout == "via-sdk\n"
        with pytest.raises(warren.ConflictError):
            imgs.remove(img.digest, force=True)
    with pytest.raises(warren.NotFoundError):
        imgs.get("sdk:nope")
    with pytest.raises(warren.InvalidArgumentError) as e:
        imgs.import_(tar_of([("../x", b"1", 0o644)]))
    assert "'..' component refused" in e.value.message
    assert imgs.remove("sdk:2") is False  # other names keep it
    assert imgs.pin("sdk:1").pinned and not imgs.unpin("sdk:1").pinned
    assert imgs.gc(dry_run=True)["dry_run"] is True
    evs = imgs.events(limit=1000)
    assert any(e.type == "image_imported" and "sdk:1" in e.detail["refs"] for e in evs)
    assert imgs.events(since=evs[-1].seq) == []


def test_sdk_images_async(conn):
    async def main():
        imgs = AsyncImages(**conn)
        body = tar_of([("./", None, 0o755), ("./async-marker", b"a", 0o644)])
        img = await imgs.import_(body, ref="async/img:1")
        assert (await imgs.get("async/img:1")).digest == img.digest
        assert "async/img:2" in (await imgs.tag("async/img:1", "async/img:2")).refs
        assert await imgs.remove("async/img:1") is False
        assert await imgs.remove("async/img:2") is True
        with pytest.raises(warren.NotFoundError):
            await imgs.get(img.digest)
        assert (await imgs.gc(dry_run=True))["dry_run"] is True
        evs = await imgs.events(limit=1000)
        assert evs[-1].type == "image_removed" and evs[-1].detail["digest"] == img.digest
        await warren.aclose_shared_clients()

    asyncio.run(main())


def test_docker_archive_via_cli(cli, warrend, tmp_path):
    from test_images import base_config, docker_archive
    base = tar_of_dir(warrend.images / "busybox")
    top = tar_of([("etc/", None, 0o755), ("etc/motd", b"hi from archive\n", 0o644)])
    arch = tmp_path / "save.tar"
    arch.write_bytes(docker_archive([base, top], base_config([base, top])))
    img = cli.json("image", "import", "--ref", "saved:1", str(arch))
    assert img["source"] == "docker-archive:upload"
    assert json.loads(json.dumps(img))["layers"][0].startswith("sha256:")
    with tarfile.open(arch) as t:
        assert "manifest.json" in t.getnames()
