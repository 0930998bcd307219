"""Files through the Python SDK, streamed output, timeouts that kill the
command's process tree and terminals, on the VM tiers (microvm: warren's own
guest agent; vm: the stock qemu-guest-agent). One VM per tier for the
module (vmtiers.py); test_api_files.py and test_api_pty.py run the full file
and terminal suites on these tiers through the raw API."""
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
from warren import Sandbox  # noqa: E402
from vmtiers import tier_fixtures  # noqa: E402
from test_api_pty import Pty  # noqa: E402

api, sandbox, tier = tier_fixtures(["microvm", "vm"])


@pytest.fixture
def sb(sandbox, tier):
    return Sandbox.connect(sandbox, socket=str(tier.d.sock), request_timeout=600)


def test_sdk_files_round_trip(sb):
    e = sb.files.write("/sdk/hello.txt", "héllo\n")
    assert e.type == "file" and e.size == len("héllo\n".encode())
    assert sb.files.read("/sdk/hello.txt") == "héllo\n"
    blob = bytes(range(256)) * 64 + b"\x00\xff\x00"
    sb.files.write("/sdk/deep/er/blob.bin", blob, mode=0o600)  # parents created
    assert sb.files.read("/sdk/deep/er/blob.bin", format="bytes") == blob
    info = sb.files.get_info("/sdk/deep/er/blob.bin")
    assert (info.size, info.mode, info.name) == (len(blob), 0o600, "blob.bin")
    assert sb.commands.run("md5sum /sdk/deep/er/blob.bin").stdout.split()[0] == \
        hashlib.md5(blob).hexdigest()
    big = os.urandom(3 << 20)
    sb.files.write("/sdk/big.bin", big)
    got = b"".join(sb.files.read("/sdk/big.bin", format="stream"))
    assert hashlib.sha256(got).digest() == hashlib.sha256(big).digest()
    assert sb.files.make_dir("/sdk/w/a/b") is True
    assert sb.files.make_dir("/sdk/w/a/b") is False
    sb.files.write("/sdk/w/a/b/f.txt", "x")
    sb.files.write("/sdk/w/a/top.txt", "yy")
    names = {e.name: e for e in sb.files.list("/sdk/w/a")}
    assert set(names) == {"b", "top.txt"}
    assert names["b"].type == "dir" and names["top.txt"].size == 2
    assert "/sdk/w/a/b/f.txt" in {e.path for e in sb.files.list("/sdk/w/a", depth=2)}
    assert sb.files.exists("/sdk/w/a/b/f.txt") and not sb.files.exists("/sdk/w/nope")
    assert sb.files.rename("/sdk/w/a/top.txt", "/sdk/w/moved.txt").path == "/sdk/w/moved.txt"
    assert sb.files.read("/sdk/w/moved.txt") == "yy"
    sb.files.remove("/sdk/w")
    assert not sb.files.exists("/sdk/w")
    with pytest.raises(warren.NotFoundError):
        sb.files.read("/sdk/w/a/b/f.txt")
    sb.commands.run("ln -s /etc/hostname /sdk/link")
    link = sb.files.get_info("/sdk/link")
    assert link.type == "symlink" and link.target == "/etc/hostname"


def test_symlinks_in_the_guest_stay_in_the_guest(sb):
    # a link to the guest's / and one to /etc: reads and writes resolve
    # in the guest's own tree, never on the host
    sb.commands.run("mkdir -p /esc && ln -sfn / /esc/root && ln -sfn /etc /esc/etc"
                    " && echo guest > /esc/marker")
    assert sb.files.read("/esc/root/esc/marker") == "guest\n"
    assert sb.files.read("/esc/../../../../esc/marker") == "guest\n"
    sb.files.write("/esc/root/esc/via-link", "w")
    assert sb.commands.run("cat /esc/via-link").stdout == "w"
    assert not os.path.exists("/esc/via-link")
    # a write at a symlink replaces the link, never writes through it
    sb.commands.run("ln -sfn /esc/marker /esc/l2")
    sb.files.write("/esc/l2", "new")
    assert sb.files.get_info("/esc/l2").type == "file"
    assert sb.files.read("/esc/marker") == "guest\n"
    # other filesystems of the guest (/proc, /sys) are refused
    with pytest.raises(warren.InvalidArgumentError):
        sb.files.read("/proc/1/environ")


def test_output_streams_while_the_command_runs(sb):
    when = []
    t0 = time.monotonic()
    r = sb.commands.run("echo first; echo err1 >&2; sleep 3; echo second",
                        on_stdout=lambda c: when.append((time.monotonic(), c)))
    t_end = time.monotonic()
    assert r.exit_code == 0 and r.stdout == "first\nsecond\n" and r.stderr == "err1\n", r
    t_first = next(t for t, c in when if "first" in c)
    # "first" arrived while the command was still sleeping
    assert t_end - t_first > 1.5, (t0, t_first, t_end, when)


# How many processes of the guest have an argument matching the pattern
# (the Debian VM image has no ps; the pattern's brackets keep grep from
# counting itself)
_COUNT = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -cx '%s'"


def test_timeout_kills_the_process_tree(sb):
    r = sb.commands.run("sleep 301301 & sleep 302302 & sleep 303303", timeout=2)
    assert r.exit_code != 0
    deadline = time.time() + 30
    while True:
        out = sb.commands.run(_COUNT % "30[123]30[123]").stdout
        if out.strip() == "0":
            break
        assert time.time() < deadline, f"still running after the timeout: {out}"
        time.sleep(0.5)


def test_timeout_ends_what_the_command_left_behind(sb):
    """The first process exits at once; what it detached (its own session,
    reparented to the guest's init) still ends at the command's timeout
    (microvm: the command's cgroup; vm: its systemd scope)."""
    r = sb.commands.run("setsid sleep 304304 </dev/null >/dev/null 2>&1 & "
                        "for i in 1 2 3 4 5 6 7 8 9 10; do "
                        f"[ \"$({_COUNT % '30430[4]'})\" = 1 ] && echo started && exit 0; "
                        "sleep 0.2; done; exit 1", timeout=8)
    assert r.exit_code == 0 and r.stdout == "started\n", r
    deadline = time.time() + 60
    while True:
        out = sb.commands.run(_COUNT % "30430[4]").stdout
        if out.strip() == "0":
            break
        assert time.time() < deadline, f"still running after the timeout: {out}"
        time.sleep(0.5)


def test_terminal(tier, sandbox):
    p = Pty(tier.d, sandbox, "?rows=30&cols=100")
    if tier.name == "vm":
        assert p.status == 501, p.body
        assert p.body["error"]["code"] == "not_implemented"
        assert "qemu-guest-agent" in p.body["error"]["message"]
        p.close()
        return
    assert p.status == 101
    p.type("stty size; exit 5\n")
    out, ex = p.until_exit()
    assert "30 100" in out and ex["exit_code"] == 5, (out, ex)
    p.close()


def test_no_vnc_unless_asked(tier, api, sandbox):
    if tier.name != "vm":
        pytest.skip("VNC is the vm tier's (test_vm_access.py asks for it)")
    assert "display" not in api.get(f"/v1/sandboxes/{sandbox}").json()
    vmdir = tier.d.run / "vm" / sandbox
    assert vmdir.is_dir() and not (vmdir / "vnc.sock").exists()
    assert not (vmdir / "vnc.pass").exists()
    pid = json.loads((vmdir / "vm.json").read_text())["pid"]
    argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    assert b"-vnc" not in argv, argv
