"""vm-disk images (issue 10): bootable disks (raw, qcow2) in the image store
with names, tags and digests, checked with qemu-img at import (no backing or
data file, no encryption, bounded size), their firmware (bios, uefi)
detected or given (uefi-secure: Secure Boot, only when asked), refused by
the wrong tier, pushed to and pulled from a
registry on loopback (the same digest on a second store); `image build-vm`
building a bootable disk from a store rootfs and Debian's cloud kernel,
booted (TCG) from the store, the base's digest unchanged after the VM wrote
to its disk; the same built with the Secure Boot chain booted with Secure
Boot (and an unsigned kernel refused by it); the SDK's large uploads."""
import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from conftest import find_images  # noqa: E402
from warren.exceptions import WarrenError  # noqa: E402
from warren.images import Images  # noqa: E402
from registry_util import Registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def sha_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return "sha256:" + h.hexdigest()


def qemu_img(*args):
    # LUKS key slots: qemu-img times PBKDF2 iterations by the thread's CPU
    # time and gives up ("Unable to get accurate CPU usage") when a round
    # measured none, which a busy paravirtualised host does now and then
    # (a CI run at 19:10): that is the tool's set-up, not what is tested,
    # so it is tried again
    for _ in range(5):
        p = subprocess.run(["qemu-img", *map(str, args)], capture_output=True, text=True)
        if "Unable to get accurate CPU usage" not in p.stderr:
            break
    # its message in the failure: once under load a create failed and
    # CalledProcessError kept the reason to itself
    assert p.returncode == 0, (args, p.stderr)


def raw_disk(path, size=8 << 20):
    """A small raw disk with an MBR partition table (content is not booted)."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(446)
        f.write(bytes([0x80, 0, 0x21, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little")
                + (size // 512 - 2048).to_bytes(4, "little"))
        f.seek(510)
        f.write(b"\x55\xaa")
        f.seek(1 << 20)
        f.write(b"warren-disk-%d\n" % os.getpid())
    return path


def cli(d, *args, input=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
    env["WARREN_SOCKET"] = str(d.sock)
    p = subprocess.run([str(d.build / "warren"), *map(str, args)], capture_output=True,
                       input=input, env=env, timeout=300)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


@pytest.fixture
def vmd(fresh_daemon, build):
    """A daemon with the vm tier (TCG) and a configured rootfs image."""
    return fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 900,
                                      "shutdown_timeout": 60},
                               "images": {"busybox": str(find_images(build) / "busybox")},
                               "image_store": {"grace": 0}}).start()


def test_import_raw_and_qcow2_list_tag_remove(vmd, tmp_path):
    raw = raw_disk(tmp_path / f"d-{os.getpid()}.raw")
    qc = tmp_path / f"d-{os.getpid()}.qcow2"
    qemu_img("convert", "-f", "raw", "-O", "qcow2", raw, qc)
    c = vmd.client()
    try:
        # raw through the API body (streamed), qcow2 through the CLI
        r = c.request("POST", "/v1/images/import?format=vm-disk&ref=disk:raw",
                      body=raw.read_bytes())
        assert r.status == 201, r
        img = r.json()
        assert img["kind"] == "vm-disk" and img["digest"] == sha_file(raw), img
        assert img["disk"] == {"format": "raw", "virtual_size": 8 << 20,
                               "firmware": "bios"}, img
        assert img["size"] == 8 << 20 and img["refs"] == ["disk:raw"], img
        rc, out, err = cli(vmd, "image", "import", "--vm-disk", "--ref", "disk:qcow2", qc)
        assert rc == 0, err
        assert out.strip() == sha_file(qc)
        got = c.get("/v1/images/disk:qcow2").json()
        assert got["kind"] == "vm-disk" and got["disk"]["format"] == "qcow2", got
        assert got["disk"]["virtual_size"] == 8 << 20 and got["size"] < 8 << 20, got
        # the same bytes again: one image, the same digest
        r = c.request("POST", "/v1/images/import?format=vm-disk&ref=disk:again",
                      body=raw.read_bytes())
        assert r.status == 201 and r.json()["digest"] == img["digest"], r
        # the Unix socket's path import and the SDK
        imgs = Images(socket=str(vmd.sock))
        info = imgs.import_vm_disk(str(qc), ref="disk:sdk", node_path=True)
        assert info.kind == "vm-disk" and info.digest == got["digest"], info
        assert info.disk == {"format": "qcow2", "virtual_size": 8 << 20, "firmware": "bios"}
        # listed, tagged and removed like any image
        kinds = {i["digest"]: i["kind"] for i in c.get("/v1/images").json()["images"]}
        assert kinds[img["digest"]] == "vm-disk" and kinds[got["digest"]] == "vm-disk"
        rc, out, err = cli(vmd, "image", "ls")
        assert rc == 0 and "vm-disk" in out, out
        r = c.post("/v1/images/disk:raw/tag", {"ref": "disk:stable"})
        assert r.status == 200 and "disk:stable" in r.json()["refs"], r
        for ref in ("disk:raw", "disk:again", "disk:stable"):
            assert c.delete(f"/v1/images/{ref}").status == 200
        assert c.get(f"/v1/images/{img['digest']}").status == 404
        assert not (vmd.state / "images/blobs/sha256" / img["digest"][7:]).exists()
        # names go, the disk stays while named; unnamed, gc reclaims it
        r = c.delete("/v1/images/disk:qcow2")
        assert r.status == 200 and r.json()["removed"] is False, r
        r = c.post("/v1/images/disk:sdk/tag", {"ref": "disk:gone"})
        assert r.status == 200, r
        for ref in ("disk:sdk", "disk:gone"):
            assert c.request("DELETE", f"/v1/images/{ref}").status == 200
        assert c.get(f"/v1/images/{got['digest']}").status == 404
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=qc.read_bytes())
        assert r.status == 201 and r.json()["refs"] == [], r
        r = c.request("POST", "/v1/images/gc?prune_untagged=1")
        assert r.status == 200, r
        assert [x["digest"] for x in r.json()["removed"]] == [got["digest"]], r.json()
        assert c.get(f"/v1/images/{got['digest']}").status == 404
        assert os.listdir(vmd.state / "images/blobs/sha256") == []
    finally:
        c.close()


def gpt_disk(path, *types, size=8 << 20):
    """A raw GPT disk with partitions of the given type GUIDs (sfdisk)."""
    with open(path, "wb") as f:
        f.truncate(size)
    table = "label: gpt\n" + "".join(f"size=1M, type={t}\n" for t in types)
    subprocess.run(["sfdisk", "-q", str(path)], input=table.encode(), check=True,
                   capture_output=True)
    return path


ESP = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
BIOS_BOOT = "21686148-6449-6E6F-744E-656564454649"
LINUX = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"


def test_firmware_detected_or_given(vmd, tmp_path):
    pid = os.getpid()
    uefi = gpt_disk(tmp_path / f"uefi-{pid}.raw", ESP, LINUX)
    hybrid = gpt_disk(tmp_path / f"hybrid-{pid}.raw", BIOS_BOOT, ESP, LINUX)
    plain = gpt_disk(tmp_path / f"gpt-{pid}.raw", LINUX)
    mbr = raw_disk(tmp_path / f"mbr-{pid}.raw")
    uq = tmp_path / f"uefi-{pid}.qcow2"
    qemu_img("convert", "-f", "raw", "-O", "qcow2", uefi, uq)
    c = vmd.client()
    try:
        def imp(path, q=""):
            r = c.request("POST", f"/v1/images/import?format=vm-disk{q}", body=path.read_bytes())
            return r

        # GPT + an EFI system partition and no BIOS boot partition: uefi,
        # also read through a qcow2's clusters; everything else boots with
        # SeaBIOS
        for disk, want in ((uefi, "uefi"), (uq, "uefi"), (hybrid, "bios"), (plain, "bios"),
                           (mbr, "bios")):
            r = imp(disk)
            assert r.status == 201 and r.json()["disk"]["firmware"] == want, (disk, r)
        # or as asked (new bytes: a disk imported again keeps the record of
        # its first import): the CLI's --firmware, the API's firmware
        mbr2 = raw_disk(tmp_path / f"mbr2-{pid}.raw", size=12 << 20)
        uefi2 = gpt_disk(tmp_path / f"uefi2-{pid}.raw", ESP, LINUX, size=12 << 20)
        rc, out, err = cli(vmd, "image", "import", "--vm-disk", "--firmware", "uefi",
                           "--ref", "disk:asked", mbr2)
        assert rc == 0, err
        assert c.get("/v1/images/disk:asked").json()["disk"]["firmware"] == "uefi"
        r = c.post("/v1/images/import", {"path": str(uefi2), "format": "vm-disk",
                                         "firmware": "bios", "ref": "disk:asked2"})
        assert r.status == 201 and r.json()["disk"]["firmware"] == "bios", r
        # Secure Boot only when asked for (a disk does not say which keys
        # it expects)
        uefi3 = gpt_disk(tmp_path / f"uefi3-{pid}.raw", ESP, LINUX, size=14 << 20)
        rc, out, err = cli(vmd, "image", "import", "--vm-disk", "--firmware", "uefi-secure",
                           "--ref", "disk:secure", uefi3)
        assert rc == 0, err
        assert c.get("/v1/images/disk:secure").json()["disk"]["firmware"] == "uefi-secure"
        # refused with the field named
        for bad in ("efi", "uefi-secure2", "UEFI", "uefi+secure"):
            r = imp(mbr, "&firmware=" + urllib.parse.quote(bad))
            assert r.status == 400 and r.error == ("invalid_argument", "firmware"), (bad, r)
            assert "uefi-secure" in r.json()["error"]["message"], r
        r = c.post("/v1/images/import", {"path": str(uefi2), "format": "vm-disk",
                                         "firmware": "uefi-secure-x"})
        assert r.status == 400 and r.error == ("invalid_argument", "firmware"), r
        rc, out, err = cli(vmd, "image", "build-vm", "--firmware", "secure", "debian:vm")
        assert rc != 0 and "uefi-secure" in err and len(err.strip().splitlines()) == 1, err
        r = c.request("POST", "/v1/images/import?format=tar&firmware=uefi", body=b"x" * 1024)
        assert r.status == 400 and r.error == ("invalid_argument", "firmware"), r
        rc, out, err = cli(vmd, "image", "import", "--firmware", "uefi", mbr)
        assert rc != 0 and "--firmware" in err and len(err.strip().splitlines()) == 1, err
    finally:
        c.close()


def reg_request(reg, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection(reg.host, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def put_blob(reg, repo, data):
    """A monolithic upload straight to the registry (no warren)."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    st, h, _ = reg_request(reg, "POST", f"/v2/{repo}/blobs/uploads/")
    assert st == 202, st
    loc = urllib.parse.urlsplit(h["Location"])
    q = loc.query + ("&" if loc.query else "") + "digest=" + digest
    st, _, body = reg_request(reg, "PUT", f"{loc.path}?{q}", data,
                              {"Content-Type": "application/octet-stream"})
    assert st == 201, (st, body)
    return digest


def put_manifest(reg, repo, tag, man):
    st, _, body = reg_request(reg, "PUT", f"/v2/{repo}/manifests/{tag}",
                              json.dumps(man).encode(),
                              {"Content-Type": man["mediaType"]})
    assert st == 201, (st, body)


@pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                    reason="docker-registry not installed (scripts/deps.sh)")
def test_disks_push_and_pull_through_a_registry(vmd, fresh_daemon, tmp_path):
    """A vm-disk travels as an OCI artifact (one layer: the disk as it is,
    its format and firmware annotated); a second store pulls it to the same
    digest, kind and firmware, checked by qemu-img as any import."""
    reg = Registry(tmp_path / "registry")
    uefi = gpt_disk(tmp_path / f"push-{os.getpid()}.raw", ESP, LINUX)
    qc = tmp_path / f"push-{os.getpid()}.qcow2"
    qemu_img("convert", "-f", "raw", "-O", "qcow2", uefi, qc)
    c = vmd.client()
    node2 = fresh_daemon(extra={"image_store": {"grace": 0}}).start()
    c2 = node2.client()
    try:
        for name, disk, fmt in (("raw", uefi, "raw"), ("qc", qc, "qcow2")):
            r = c.request("POST", f"/v1/images/import?format=vm-disk&ref=disk:{name}",
                          body=disk.read_bytes())
            assert r.status == 201, r
            img = r.json()
            remote = f"{reg.host}/vms/{name}:1"
            p = c.post(f"/v1/images/disk:{name}/push", {"to": remote})
            assert p.status == 200, p
            pj = p.json()
            # config and the disk: no chunk index (disks are pulled whole)
            assert pj["digest"] == img["digest"] and pj["blobs_sent"] == 2, pj
            g = c2.post("/v1/images/pull", {"ref": remote})
            assert g.status == 200, g
            gj = g.json()
            assert gj["digest"] == img["digest"] == sha_file(disk), gj
            assert gj["kind"] == "vm-disk" and gj["complete"] is True, gj
            assert gj["disk"] == {"format": fmt, "virtual_size": 8 << 20,
                                  "firmware": "uefi"}, gj
            assert gj["source"] == f"registry:{reg.host}/vms/{name}@{pj['manifest_digest']}"
            blob = node2.state / "images/blobs/sha256" / gj["digest"][7:]
            assert sha_file(blob) == img["digest"]
            # again: nothing fetched; a lazy pull of a disk is a whole one
            g2 = c2.post("/v1/images/pull", {"ref": remote, "as": f"again:{name}"}).json()
            assert g2["pull"]["already"] is True and g2["pull"]["bytes_fetched"] == 0, g2
        # the pulled disk is a vm-disk there too: refused by the container tier
        r = c2.post("/v1/sandboxes", {"image": "vms/raw:1", "timeout": 60})
        assert r.status == 400 and r.error == ("invalid_argument", "image"), r
        # a registry's disk that is not a safe disk is refused at pull: a
        # qcow2 with a backing file, pushed under a warren artifact's name
        bad = tmp_path / f"bad-{os.getpid()}.qcow2"
        qemu_img("create", "-f", "qcow2", "-b", str(qc), "-F", "qcow2", bad)
        blob_digest = put_blob(reg, "vms/bad", bad.read_bytes())
        cfg = b"{}"
        cfg_digest = put_blob(reg, "vms/bad", cfg)
        man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                          "digest": cfg_digest, "size": len(cfg)},
               "layers": [{"mediaType": "application/vnd.warren.image.vm-disk.v1",
                           "digest": blob_digest, "size": bad.stat().st_size}]}
        put_manifest(reg, "vms/bad", "1", man)
        r = c2.post("/v1/images/pull", {"ref": f"{reg.host}/vms/bad:1"})
        assert r.status == 400 and "backing file" in r.json()["error"]["message"], r
        assert not [i for i in c2.get("/v1/images").json()["images"]
                    if i["digest"] == "sha256:" + hashlib.sha256(bad.read_bytes()).hexdigest()]
    finally:
        c.close()
        c2.close()
        reg.stop()


def test_unsafe_disks_are_refused(vmd, tmp_path):
    raw = raw_disk(tmp_path / f"base-{os.getpid()}.raw")
    secret = tmp_path / "secret.raw"
    secret.write_bytes(b"host secret" * 100)
    c = vmd.client()
    try:
        # a qcow2 whose backing file is a host path
        ov = tmp_path / "backed.qcow2"
        qemu_img("create", "-f", "qcow2", "-b", secret, "-F", "raw", ov, "8M")
        r = c.request("POST", "/v1/images/import?format=vm-disk&ref=evil:1",
                      body=ov.read_bytes())
        assert r.status == 400 and r.error == ("invalid_argument", "body"), r
        assert "backing file" in r.json()["error"]["message"], r
        rc, out, err = cli(vmd, "image", "import", "--vm-disk", ov)
        assert rc != 0 and len(err.strip().splitlines()) == 1 and "backing" in err, err
        # an external data file
        df = tmp_path / "datafile.qcow2"
        qemu_img("create", "-f", "qcow2", "-o", f"data_file={tmp_path / 'data.raw'}", df, "8M")
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=df.read_bytes())
        assert r.status == 400 and "external" in r.json()["error"]["message"], r
        # encrypted
        enc = tmp_path / "enc.qcow2"
        qemu_img("create", "-f", "qcow2", "--object", "secret,id=s0,data=pw",
                 "-o", "encrypt.format=luks,encrypt.key-secret=s0", enc, "8M")
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=enc.read_bytes())
        assert r.status == 400 and "encrypt" in r.json()["error"]["message"], r
        # a damaged qcow2 (the L1 table pointer off the end of the file)
        good = tmp_path / "good.qcow2"
        qemu_img("convert", "-f", "raw", "-O", "qcow2", raw, good)
        bad = bytearray(good.read_bytes())
        bad[40:48] = (1 << 40).to_bytes(8, "big")  # l1_table_offset
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=bytes(bad))
        assert r.status == 400, r
        # a virtual size over the store's max_unpacked (64G by default)
        huge = tmp_path / "huge.qcow2"
        qemu_img("create", "-f", "qcow2", huge, "100T")
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=huge.read_bytes())
        assert r.status == 413 and "virtual size" in r.json()["error"]["message"], r
        # an empty body and an unknown format
        r = c.request("POST", "/v1/images/import?format=vm-disk", body=b"")
        assert r.status == 400, r
        r = c.request("POST", "/v1/images/import?format=vmdisk", body=raw.read_bytes())
        assert r.status == 400 and r.error[1] == "format", r
        # nothing half-imported
        assert c.get("/v1/images").json()["images"] == []
        assert os.listdir(vmd.state / "images/blobs/sha256") == []
        assert [n for n in os.listdir(vmd.state / "images/tmp") if not n.startswith(".")] == []
    finally:
        c.close()


def test_sdk_vm_parameters_reach_the_daemon(vmd, tmp_path):
    """The SDK's vm parameters (firmware at import and build-vm, display at
    create, keep_memory at pause), sync and async, as the daemon reads
    them: taken where they apply, refused naming the field where they do
    not. No VM boots (the vm tier's own tests boot the few there are)."""
    import asyncio
    from warren import AsyncSandbox, Sandbox
    from warren.exceptions import InvalidArgumentError
    from warren.images import AsyncImages
    pid = os.getpid()
    sock = str(vmd.sock)
    mbr = raw_disk(tmp_path / f"sdk-{pid}.raw", size=10 << 20)
    imgs = Images(socket=sock)
    info = imgs.import_vm_disk(mbr.read_bytes(), ref="disk:sdkfw", firmware="uefi")
    assert info.kind == "vm-disk" and info.disk["firmware"] == "uefi", info
    uefi = gpt_disk(tmp_path / f"sdk-uefi-{pid}.raw", ESP, LINUX, size=10 << 20)
    info = imgs.import_vm_disk(str(uefi), ref="disk:sdkfw2", node_path=True, firmware="bios")
    assert info.disk["firmware"] == "bios", info
    # (the refusals by path: a refused upload's body is cut short)
    with pytest.raises(InvalidArgumentError) as e:
        imgs.import_vm_disk(str(mbr), node_path=True, firmware="efi")
    assert e.value.field == "firmware", e.value
    with pytest.raises(InvalidArgumentError) as e:
        imgs.build_vm("busybox", ref="vm:sdk", firmware="coreboot")
    assert e.value.field == "firmware", e.value
    # display: the vm tier's; a container has none, and the shape is checked
    with pytest.raises(InvalidArgumentError) as e:
        Sandbox.create("busybox", display={"vnc": True}, socket=sock, timeout=60)
    assert e.value.field == "display", e.value
    with pytest.raises(InvalidArgumentError) as e:
        Sandbox.create("disk:sdkfw", tier="vm", display={"vnc": 1}, socket=sock, timeout=60)
    assert e.value.field == "display", e.value
    # keep_memory reaches the daemon: false is a pause to disk (a
    # container: CRIU, where the node has a working one; else refused,
    # naming the field, the sandbox still running); true the plain pause
    sb = Sandbox.create("busybox", socket=sock, timeout=120)
    vc = vmd.client()
    ckpt = vc.get("/v1/health").json()["checkpoint"]["available"]

    def to_disk(pause):
        if ckpt:
            assert pause().state == "paused"
            ev = [e for e in vc.get(f"/v1/sandboxes/{sb.sandbox_id}/events")
                  .json()["events"] if e["type"] == "paused"][-1]
            assert ev["detail"]["keep_memory"] is False, ev
            return
        with pytest.raises(InvalidArgumentError) as e:
            pause()
        assert e.value.field == "keep_memory", e.value
        assert sb.get_info().state == "running"
    try:
        to_disk(lambda: sb.pause(keep_memory=False))
        sb.resume()
        assert sb.pause(keep_memory=True).state == "paused"
        sb.resume()

        async def go():
            a = AsyncImages(socket=sock)
            with pytest.raises(InvalidArgumentError) as e:
                await a.import_vm_disk(str(mbr), node_path=True, firmware="efi")
            assert e.value.field == "firmware"
            got = await a.import_vm_disk(str(uefi), node_path=True, firmware="bios")
            assert got.disk["firmware"] == "bios", got
            with pytest.raises(InvalidArgumentError) as e:
                await AsyncSandbox.create("busybox", display={"vnc": True}, socket=sock,
                                          timeout=60)
            assert e.value.field == "display"
            asb = await AsyncSandbox.connect(sb.sandbox_id, socket=sock)
            return await asb.pause(keep_memory=False)
        to_disk(lambda: asyncio.run(go()))
    finally:
        sb.kill()
        vc.close()


def test_sdk_large_uploads_get_the_daemon_answer(vmd):
    """Large bodies (10 MiB) through the SDK, sync and async, on the Unix
    socket: one the daemon refuses (a bad firmware) raises the daemon's 400
    naming the field, each time on the same pool (not a broken pipe, not
    MHD's "Request malformed" for a connection out of step: anyio 3.6 sent
    the start of a large async body again after a partial send); a valid
    one arrives intact (the async import has the sync one's digest)."""
    import asyncio
    import io
    import tarfile
    from warren.exceptions import InvalidArgumentError
    from warren.images import AsyncImages
    sock = str(vmd.sock)
    body = b"\0" * (10 << 20)
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as t:
        data = bytes(range(256)) * (40 << 10)
        ti = tarfile.TarInfo("big")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    tar = bio.getvalue()
    imgs = Images(socket=sock)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError) as e:
            imgs.import_vm_disk(body, ref="disk:early", firmware="efi")
        assert e.value.field == "firmware" and e.value.status == 400, e.value
    want = imgs.import_(tar, ref="big:sync").digest

    async def go():
        a = AsyncImages(socket=sock)
        for _ in range(3):
            with pytest.raises(InvalidArgumentError) as e:
                await a.import_vm_disk(body, ref="disk:early", firmware="efi")
            assert e.value.field == "firmware" and e.value.status == 400, e.value
        return (await a.import_(tar, ref="big:async")).digest
    assert asyncio.run(go()) == want
    assert not any("disk:early" in i.refs for i in imgs.list())


def test_wrong_kind_is_400_naming_image(vmd, tmp_path):
    raw = raw_disk(tmp_path / f"k-{os.getpid()}.raw")
    c = vmd.client()
    try:
        r = c.request("POST", "/v1/images/import?format=vm-disk&ref=disk:1", body=raw.read_bytes())
        assert r.status == 201, r
        tar = subprocess.run(["tar", "-C", str(find_images(vmd.build) / "busybox"), "-cf", "-",
                              "."], check=True, capture_output=True).stdout
        r = c.request("POST", "/v1/images/import?format=tar&ref=rootfs:1", body=tar)
        assert r.status == 201 and r.json()["kind"] == "rootfs", r
        # a disk on the container tier, a rootfs on the vm tier, a disk as a layer
        r = c.post("/v1/sandboxes", {"image": "disk:1", "timeout": 60})
        assert r.status == 400 and r.error == ("invalid_argument", "image"), r
        assert "vm-disk" in r.json()["error"]["message"], r
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "rootfs:1", "timeout": 60})
        assert r.status == 400 and r.error == ("invalid_argument", "image"), r
        r = c.post("/v1/sandboxes", {"image": "rootfs:1", "layers": ["disk:1"],
                                     "timeout": 60})
        assert r.status == 400 and r.error == ("invalid_argument", "layers[0]"), r
        # the refused creates hold nothing: the disk can go
        assert c.get("/v1/images/disk:1").json()["holders"] == 0
        assert c.get("/v1/sandboxes").json()["sandboxes"] == []
        with pytest.raises(WarrenError):
            Images(socket=str(vmd.sock)).import_(b"", format="vm-disk")
    finally:
        c.close()


# EFI_GLOBAL_VARIABLE's GUID
SB_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
# a variable of the guest's own (non-volatile, boot and runtime access)
OWN_VAR = "/sys/firmware/efi/efivars/WarrenTest-3f0e1c52-5b8e-4c1d-9a57-6b0c1d2e3f40"


def secure_boot_vm(c, d):
    """The same tree built with --firmware uefi-secure (shim, Debian's
    signed GRUB and kernel on the ESP) boots with OVMF's Secure Boot
    firmware (Microsoft's keys enrolled) to a ready agent: the guest's
    SecureBoot variable reads 1. A variable the guest writes lives in the
    VM's own copy of the store and comes back after a pause to disk (the
    store is saved with the state). The second boot of this file."""
    r = c.post("/v1/images/build-vm", {"image": "debian:vm", "ref": "debian-vm:secure",
                                       "size": "2G", "firmware": "uefi-secure"})
    assert r.status == 201, r
    assert r.json()["disk"]["firmware"] == "uefi-secure", r.json()
    t0 = time.monotonic()
    r = c.post("/v1/sandboxes", {"tier": "vm", "image": "debian-vm:secure",
                                 "memory_mb": 512, "timeout": 1800})
    assert r.status == 201, r
    sid = r.json()["id"]
    try:
        print(f"\nuefi-secure: boot to ready {time.monotonic() - t0:.0f} s")
        assert c.get(f"/v1/sandboxes/{sid}").json()["firmware"] == "uefi-secure"
        vars_fd = d.run / "vm" / sid / "efivars.fd"
        assert vars_fd.stat().st_size == Path("/usr/share/OVMF/OVMF_VARS_4M.ms.fd").stat().st_size
        out = c.run(sid, ["sh", "-c", f"od -An -tu1 {SB_VAR}; "
                          f"printf '\\007\\000\\000\\000kept' > {OWN_VAR} && echo written; "
                          "dmesg | grep -c 'Secure boot enabled'"])
        assert out["exit_code"] == 0, out
        sb, written, kernel = out["stdout"].splitlines()
        assert kernel == "1", out  # the kernel saw it too (and locked itself down)
        # efivarfs: 4 bytes of attributes, then the value
        assert sb.split()[-1] == "1" and len(sb.split()) == 5, out
        assert written == "written", out
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        assert not vars_fd.exists()  # the VM's directory went with QEMU
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200, r
        out = c.run(sid, ["sh", "-c", f"od -An -tu1 {SB_VAR} {OWN_VAR}"])
        assert out["exit_code"] == 0, out
        got = out["stdout"].split()
        assert got[4] == "1", out
        assert bytes(int(x) for x in got[-4:]) == b"kept", out
    finally:
        c.kill(sid)


def strip_signature(src, dst):
    """A copy of a signed PE image (the kernel) without its Authenticode
    signature: the certificate table's entry zeroed, the table cut off."""
    import struct
    b = bytearray(Path(src).read_bytes())
    pe = struct.unpack_from("<I", b, 0x3c)[0]
    assert b[pe:pe + 4] == b"PE\0\0" and struct.unpack_from("<H", b, pe + 24)[0] == 0x20b
    entry = pe + 24 + 112 + 4 * 8  # PE32+: data directory 4, the certificate table
    off, size = struct.unpack_from("<II", b, entry)
    assert off and size, "the kernel is not signed"
    struct.pack_into("<II", b, entry, 0, 0)
    Path(dst).write_bytes(bytes(b[:off]))


def test_secure_boot_refuses_an_unsigned_kernel(build, tmp_path):
    """build-vm's Secure Boot chain (mkvmimage.sh --firmware uefi-secure)
    with the cloud kernel's signature removed: OVMF (Secure Boot, the tier's
    machine and pflash arguments) starts shim and the signed GRUB, and GRUB
    refuses the kernel ("bad shim signature"). QEMU run directly to GRUB's
    message, no boot: a VM of warren would sit at GRUB's prompt until its
    boot timeout."""
    root = build / "tests" / "vm" / "debian-vm.root"
    if not (root / ".complete").exists():
        pytest.fail(f"the VM tree is not built ({root}); ninja builds it with the tests")
    kver = sorted(p.name[len("vmlinuz-"):] for p in (root / "boot").glob("vmlinuz-*"))[-1]
    kroot = tmp_path / "kroot"
    (kroot / "boot").mkdir(parents=True)
    (kroot / "lib" / "modules").mkdir(parents=True)
    strip_signature(root / "boot" / f"vmlinuz-{kver}", kroot / "boot" / f"vmlinuz-{kver}")
    subprocess.run(["cp", "-a", str(root / "boot" / f"initrd.img-{kver}"),
                    str(kroot / "boot")], check=True)
    subprocess.run(["cp", "-a", str(root / "lib" / "modules" / kver),
                    str(kroot / "lib" / "modules")], check=True)
    disk = tmp_path / "unsigned.qcow2"
    p = subprocess.run([str(ROOT / "scripts/mkvmimage.sh"), "--from", str(root),
                        "--kernel-root", str(kroot), "--out", str(disk), "--size", "2G",
                        "--firmware", "uefi-secure"], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr
    ov, vars_fd, serial = tmp_path / "ov.qcow2", tmp_path / "vars.fd", tmp_path / "serial"
    qemu_img("create", "-q", "-f", "qcow2", "-b", disk, "-F", "qcow2", ov)
    vars_fd.write_bytes(Path("/usr/share/OVMF/OVMF_VARS_4M.ms.fd").read_bytes())
    q = subprocess.Popen([
        "qemu-system-x86_64", "-M", "q35,smm=on", "-accel", "tcg", "-m", "512",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-global", "driver=cfi.pflash01,property=secure,value=on",
        "-drive", "if=pflash,unit=0,format=raw,readonly=on,"
                  "file=/usr/share/OVMF/OVMF_CODE_4M.ms.fd",
        "-drive", f"if=pflash,unit=1,format=raw,file={vars_fd}",
        "-drive", f"if=virtio,format=qcow2,file={ov}", "-serial", f"file:{serial}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = ""
    try:
        end = time.monotonic() + 300  # TCG with SMM on a loaded machine
        while time.monotonic() < end and q.poll() is None:
            text = serial.read_text(errors="replace") if serial.exists() else ""
            if "bad shim signature" in text:
                break
            time.sleep(1)
    finally:
        q.kill()
        q.wait()
        subprocess.run(["rm", "-rf", "--one-file-system", str(disk), str(ov), str(kroot)])
    assert "Welcome to GRUB" in text and "bad shim signature" in text, text[-2000:]


def test_build_vm_boots_from_the_store_and_the_base_stays(fresh_daemon, build, tmp_path):
    """The one boot of this file: a Debian rootfs image (the tests' own
    debootstrap tree, streamed as a tar through the CLI) becomes a UEFI disk
    with build-vm --firmware uefi (GPT, an EFI system partition, GRUB for
    UEFI), boots with OVMF to a ready agent from its store name, writes to
    its disk, and the base's bytes still hash to its digest afterwards. (The
    tests' other VMs boot the BIOS disk debian-vm.raw with SeaBIOS.)"""
    kroot = build / "tests" / "vm" / "debian-vm.root"
    if not (kroot / ".complete").exists():
        pytest.fail(f"the VM tree is not built ({kroot}); ninja builds it with the tests")
    d = fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 900,
                                   "shutdown_timeout": 60},
                            "images": {"busybox": str(find_images(build) / "busybox")},
                            "image_store": {"vm_build_script": str(ROOT / "scripts/mkvmimage.sh"),
                                            "vm_kernel_root": str(kroot)}}).start()
    c = d.client()
    c.timeout = 1800
    sid = None
    try:
        # device nodes stay out (an import refuses them; the guest's /dev is devtmpfs)
        tar = subprocess.Popen(["tar", "-C", str(kroot), "--exclude=./dev/*",
                                "--exclude=./.complete", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
        env["WARREN_SOCKET"] = str(d.sock)
        p = subprocess.run([str(build / "warren"), "image", "import", "--ref", "debian:vm", "-"],
                           stdin=tar.stdout, capture_output=True, env=env, timeout=1200)
        tar.wait()
        assert p.returncode == 0, p.stderr
        # a rootfs without qemu-guest-agent: refused, naming image
        busy = subprocess.run(["tar", "-C", str(find_images(build) / "busybox"), "-cf", "-",
                               "."], check=True, capture_output=True).stdout
        assert c.request("POST", "/v1/images/import?format=tar&ref=busy:1",
                         body=busy).status == 201
        r = c.post("/v1/images/build-vm", {"image": "busy:1", "ref": "busy:vm"})
        assert r.status == 400 and r.error == ("invalid_argument", "image"), r
        assert "qemu-guest-agent" in r.json()["error"]["message"], r
        # the script itself, refusing that image: its temporary mount
        # points are unmounted and gone, not left in TMPDIR (warrend gives
        # it the build's stage directory)
        busy_blob = d.state / "images/blobs/sha256" / c.get("/v1/images/busy:1").json()[
            "digest"][7:]
        tmpd = d.state / "script-tmp"
        tmpd.mkdir()
        p = subprocess.run([str(ROOT / "scripts/mkvmimage.sh"), "--from", str(busy_blob),
                            "--kernel-root", str(kroot), "--out", str(d.state / "busy.qcow2"),
                            "--size", str(1 << 30)], capture_output=True, text=True,
                           env=dict(os.environ, TMPDIR=str(tmpd)), timeout=600)
        assert p.returncode == 3 and "qemu-guest-agent" in p.stderr, p.stderr
        assert list(tmpd.iterdir()) == [] and not (d.state / "busy.qcow2").exists()
        r = c.post("/v1/images/build-vm", {"image": "debian:vm", "size": "1M"})
        assert r.status == 400 and r.error[1] == "size", r
        r = c.post("/v1/images/build-vm", {"image": "nosuch:1"})
        assert r.status == 404, r
        r = c.post("/v1/images/build-vm", {"image": "debian:vm", "firmware": "efi"})
        assert r.status == 400 and r.error[1] == "firmware", r
        # the build, through the CLI
        rc, out, err = cli(d, "image", "build-vm", "--ref", "debian-vm:built", "--size", "2G",
                           "--firmware", "uefi", "debian:vm")
        assert rc == 0, err
        img = c.get("/v1/images/debian-vm:built").json()
        assert img["kind"] == "vm-disk" and img["digest"] == out.strip(), img
        assert img["disk"] == {"format": "qcow2", "virtual_size": 2 << 30,
                               "firmware": "uefi"}, img
        src = c.get("/v1/images/debian:vm").json()
        assert img["source"] == "build-vm:" + src["digest"] and src["holders"] == 0, (img, src)
        blob = d.state / "images/blobs/sha256" / img["digest"][7:]
        assert oct(blob.stat().st_mode & 0o777) == "0o444"
        # boot it from the store
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "debian-vm:built",
                                     "memory_mb": 512, "timeout": 1800})
        assert r.status == 201, r
        sid = r.json()["id"]
        assert c.get("/v1/images/debian-vm:built").json()["holders"] == 1
        assert c.get(f"/v1/sandboxes/{sid}").json()["firmware"] == "uefi"
        # its own copy of OVMF's variable store, in the VM's directory
        assert (d.run / "vm" / sid / "efivars.fd").stat().st_size == \
            Path("/usr/share/OVMF/OVMF_VARS_4M.fd").stat().st_size
        out = c.run(sid, ["sh", "-c", "uname -r; test -x /usr/sbin/qemu-ga && echo ga; "
                          "dd if=/dev/urandom of=/root/junk bs=1M count=8 2>/dev/null; "
                          "echo kept > /root/data; sync; cat /etc/hostname; "
                          "test -d /sys/firmware/efi && echo efi"])
        assert out["exit_code"] == 0, out
        lines = out["stdout"].splitlines()
        assert lines[0].endswith("cloud-amd64") and lines[1:] == ["ga", "warren-vm", "efi"], out
        assert c.run(sid, ["cat", "/root/data"])["stdout"] == "kept\n"
        # an image in use is not removed
        r = c.delete(f"/v1/images/{img['digest']}?force=1")
        assert r.status == 409, r
        c.kill(sid)
        sid = None
        assert c.get("/v1/images/debian-vm:built").json()["holders"] == 0
        # the VM wrote to its overlay only: the base hashes to its digest
        assert sha_file(blob) == img["digest"]
        assert c.get("/v1/images/debian-vm:built").json()["digest"] == img["digest"]
        secure_boot_vm(c, d)
    finally:
        if sid:
            c.kill(sid)
        c.close()
