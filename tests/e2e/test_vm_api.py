"""The full VM tier through warrend's API (TCG here): one Debian boot for
the whole file (create, run, a warrend kill -9 and the adoption of the VM
by the next start, pause, kill), and a disk that boots nothing, reported
and cleaned up within its boot timeout."""
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

from warren import Sandbox  # noqa: E402
from conftest import Client, find_images  # noqa: E402
from warren.exceptions import WarrenError  # noqa: E402


def vm_image(build):
    img = build / "tests" / "vm" / "debian-vm.raw"
    if not img.exists():
        pytest.fail(f"the VM disk is not built ({img}); ninja builds it with the tests")
    return img


def qemu_pids(sid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/cmdline", "rb").read().find(sid.encode()) >= 0:
                out.append(p)
        except OSError:
            pass
    return out


def gone(d, sid, pids, secs=30):
    for _ in range(secs * 10):
        if not any(os.path.exists(f"/proc/{p}") for p in pids) and \
                not (d.run / "vm" / sid).exists():
            return True
        time.sleep(0.1)
    return False


def test_vm_create_run_pause_kill(fresh_daemon, build):
    img = vm_image(build)
    d = fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 600,
                                   "shutdown_timeout": 60},
                            "images": {"debian-vm": str(img)}}).start()
    # the boot may take minutes on a loaded machine (boot_timeout 600)
    c = Client(d, timeout=700)
    try:
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "debian-vm", "memory_mb": 512,
                                     "timeout": 900, "env": {"WHO": "vm"}})
        assert r.status == 201, r
        sid = r.json()["id"]
        got = c.get(f"/v1/sandboxes/{sid}").json()
        assert got["tier"] == "vm" and got["state"] == "running", got
        out = c.run(sid, ["sh", "-c", "echo $WHO; uname -r; id -u; pwd; exit 4"])
        assert out["exit_code"] == 4, out
        lines = out["stdout"].splitlines()
        assert lines[0] == "vm" and lines[1] != os.uname().release, out
        assert lines[2] == "0" and lines[3] == "/", out
        c.run(sid, ["sh", "-c", "echo kept > /root/data"])
        # warrend dies (kill -9): QEMU outlives it, and the next start
        # adopts it (QMP, console and qemu-ga sockets connected again)
        before = qemu_pids(sid)
        assert len(before) == 1, before
        c.close()
        d.kill9()
        d.start()
        c = Client(d, timeout=700)
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert qemu_pids(sid) == before
        assert c.run(sid, ["cat", "/root/data"])["stdout"] == "kept\n"
        assert c.run(sid, ["id", "-u"], user=1000)["stdout"] == "1000\n"
        t = c.run(sid, ["sleep", "100"], timeout=2)
        assert t["reason"] == "timeout", t
        # files through qemu-guest-agent (test_api_files.py has the rest)
        r = c.get(f"/v1/sandboxes/{sid}/files?path=/root/data")
        assert r.status == 200 and r.body == b"kept\n", r
        screen_and_input(c, d, sid)
        # pause stops the vCPUs (QMP stop), resume runs them again
        r = c.post(f"/v1/sandboxes/{sid}/pause", {})
        assert r.status == 200, r
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        r = c.post(f"/v1/sandboxes/{sid}/resume", {})
        assert r.status == 200, r
        assert c.run(sid, ["cat", "/root/data"])["stdout"] == "kept\n"
        pids = qemu_pids(sid)
        assert pids, "no QEMU process names the sandbox"
        c.kill(sid)
        assert gone(d, sid, pids), "QEMU or the VM's files outlived the kill"
    finally:
        c.close()


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:32]
    return struct.unpack(">II", data[16:24])


def screen_and_input(c, d, sid):
    r = c.get(f"/v1/sandboxes/{sid}/screen")
    assert r.status == 200, r
    w, h = png_size(r.body)
    assert w >= 640 and h >= 400, (w, h)
    ok = [{"type": "text", "text": "echo Hi, there!\n"},
          {"type": "key", "keys": ["ctrl", "c"]},
          {"type": "key", "keys": ["F2"]},
          {"type": "move", "x": w // 2, "y": h // 2},
          {"type": "click", "x": 10, "y": 10, "button": "right"},
          {"type": "click", "x": 10, "y": 10, "double": True},
          {"type": "scroll", "x": 1, "y": 1, "dy": -3}]
    for body in ok:
        r = c.post(f"/v1/sandboxes/{sid}/input", body)
        assert r.status == 204, (body, r)
    bad = [({"type": "jump"}, "type"), ({}, "type"),
           ({"type": "text"}, "text"), ({"type": "text", "text": "\u00e9"}, "text"),
           ({"type": "key", "keys": []}, "keys"), ({"type": "key", "keys": ["hyper"]}, "keys"),
           ({"type": "move", "x": w, "y": 0}, "x"), ({"type": "move", "x": 0}, "y"),
           ({"type": "click", "x": 1, "y": 1, "button": "fourth"}, "button"),
           ({"type": "scroll", "x": 1, "y": 1, "dy": 0}, "dy"),
           ({"type": "move", "x": 1, "y": 1, "speed": 3}, "speed")]
    for body, field in bad:
        r = c.post(f"/v1/sandboxes/{sid}/input", body)
        assert r.status == 400 and r.error[1] == field, (body, r)
    # the same through the Python SDK
    sb = Sandbox(sid, socket=str(d.sock))
    assert png_size(sb.screenshot()) == (w, h)
    sb.input.type("ls\n")
    sb.input.key("ctrl", "l")
    sb.input.move(5, 5)
    sb.input.click(5, 5)
    sb.input.scroll(5, 5, 2)
    with pytest.raises(WarrenError):
        sb.input.click(5, 5, button="fourth")
    # and through the CLI (libwarren)
    env = dict(os.environ, WARREN_SOCKET=str(d.sock))
    warren = str(d.build / "warren")
    png = d.root / f"screen-{os.getpid()}.png"

    def cli(*a):
        return subprocess.run([warren, *a], env=env, capture_output=True, text=True, timeout=120)
    p = cli("screenshot", sid, "-o", str(png))
    assert p.returncode == 0, p.stderr
    assert png_size(png.read_bytes()) == (w, h)
    for a in (["text", "pwd\n"], ["key", "ctrl", "c"], ["move", "3", "4"],
              ["click", "3", "4", "middle"], ["scroll", "3", "4", "-1"]):
        p = cli("input", sid, *a)
        assert p.returncode == 0, (a, p.stderr)
    p = cli("input", sid, "key", "hyper")
    assert p.returncode == 125 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "keys" in p.stderr or "hyper" in p.stderr, p.stderr
    p = cli("screenshot", sid)
    assert p.returncode != 0 and "-o" in p.stderr, p.stderr


def test_vm_without_agent_is_reported_and_cleaned(fresh_daemon, build, tmp_path, warrend):
    # a node without a vm object has no vm tier
    c = warrend.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "busybox"})
        assert r.status == 400 and r.error == ("invalid_argument", "tier"), r
    finally:
        c.close()
    # a disk of zeros: SeaBIOS finds nothing to boot, no agent ever answers
    blank = tmp_path / f"blank-{os.getpid()}.raw"
    with open(blank, "wb") as f:
        f.truncate(16 << 20)
    d = fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 5},
                            "images": {"blank": str(blank),
                                       "busybox": str(find_images(build) / "busybox")}}).start()
    c = d.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "busybox"})
        assert r.status == 400 and r.error[1] == "image", r
        # a container has no screen
        r = c.post("/v1/sandboxes", {"image": "busybox"})
        assert r.status == 201, r
        cid = r.json()["id"]
        r = c.get(f"/v1/sandboxes/{cid}/screen")
        assert r.status == 501 and r.error[0] == "not_implemented", r
        c.kill(cid)
        t0 = time.monotonic()
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "blank", "memory_mb": 256})
        took = time.monotonic() - t0
        assert r.status >= 400, r
        assert "guest-agent" in r.json()["error"]["message"], r
        assert took < 60, took
        vms = [s for s in c.get("/v1/sandboxes").json()["sandboxes"] if s["tier"] == "vm"]
        assert vms == [], vms
        # QEMU reaped and the VM's run directory removed
        left = list((d.run / "vm").iterdir()) if (d.run / "vm").exists() else []
        assert left == [], left
        kids = open(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children").read().split()
        qemus = [k for k in kids if open(f"/proc/{k}/comm").read().startswith("qemu")]
        assert qemus == [], qemus
    finally:
        c.close()
