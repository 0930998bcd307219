"""The microVM tier (tier "microvm", TCG on this machine): the probes that
run through exec, as uid 0 and uid 1000 in the guest.

The guest runs its own kernel and mounts the store's EROFS image (the same
busybox image, wr-probe baked in), so the boundary is the VM: root in the
guest holds every capability of the guest, and what must hold is what the
host keeps out of it. Each probe therefore asserts what the guest can reach
(no daemon socket, no host file, no canary, no network in mode none) and
host invariants (the image in the store unchanged, QEMU confined to its
limits, the daemon answering), not the container tier's errnos.
"""
import os
import time

import warren
from conftest import sha256_file, tree_digest
from catalog import MICROVM_COLUMNS
from redlib import parse, probe, unesc
from test_a_production import hunt


@probe("a-log-hunt", MICROVM_COLUMNS)
def test_a_log_hunt_microvm(ctx):
    kv, _ = hunt(ctx, secs=120)
    assert kv["done"] == "1", f"the walk did not finish: {kv}"
    assert int(kv["files"]) > 100, f"too little walked to mean anything: {kv}"
    hits = [unesc(h) for h in kv["hits"].split(",") if h]
    assert kv["nhits"] == "0", f"secrets readable: {hits}"
    names = [unesc(n) for n in kv["names"].split(",") if n]
    leaked = [n for n in names if "wr-rt-" in n]
    assert not leaked, f"host or daemon files visible: {leaked}"
    # the guest's own kernel: no host process, no other sandbox
    lines = ctx.probe("procwalk")
    for ln in lines[1:]:
        assert "sleep" not in ln and "warrend" not in ln, ln


@probe("a-rpc-forge", MICROVM_COLUMNS)
def test_a_rpc_forge_microvm(ctx):
    rt = ctx.rt
    for path in (str(rt.d.sock), "/run/warren/warren.sock", "/var/run/warren/warren.sock"):
        lines = ctx.probe("forge", "unix", path)
        assert lines[0] == "forge unix errno=ENOENT", (path, lines)
    # the daemon's TCP port: the guest has no network device in mode none
    # (not even loopback up): no route to any address, IPv6 has no source
    for addr in ["127.0.0.1"] + rt.v4 + rt.v6:
        lines = ctx.probe("forge", "tcp", addr, rt.d.port)
        assert lines[0] in ("forge tcp errno=ENETUNREACH",
                            "forge tcp errno=EADDRNOTAVAIL"), (addr, lines)


@probe("a-bin-overwrite", MICROVM_COLUMNS)
def test_a_bin_overwrite_microvm(ctx):
    rt = ctx.rt
    before = (tree_digest(rt.image_dir), sha256_file(rt.image_erofs))
    got = parse(ctx.probe("write", "/bin/busybox", 64)[0])[1]
    # root of the guest may change its own copy (the VM's writable layer);
    # uid 1000 may not
    assert got == ("ok" if ctx.uid == 0 else "EACCES"), got
    # the store's image is untouched, and the next VM sees the original
    assert (tree_digest(rt.image_dir), sha256_file(rt.image_erofs)) == before
    if ctx.uid == 0:
        fresh = ctx.fresh_sandbox()
        r = fresh.commands.run(["/bin/busybox", "true"], timeout=60)
        assert r.exit_code == 0, r


@probe("c-membomb", MICROVM_COLUMNS)
def test_c_membomb_microvm(ctx):
    """The guest's memory is the VM's: a bomb inside ends in the guest
    (its OOM killer), the VM and the host go on."""
    r = ctx.run(["wr-probe", "membomb", "1024"], timeout=120)
    assert r.reason in ("oom", "signaled") or (r.reason == "exited" and r.exit_code == 137), r
    assert ctx.run(["true"]).exit_code == 0
    assert warren.Sandbox.health(**ctx.rt.alice) is not None


@probe("d-egress-bypass", MICROVM_COLUMNS)
def test_d_egress_microvm(ctx):
    """Mode none: no network device in the guest, whatever root there may
    do with sockets."""
    got = ctx.outcomes(ctx.probe("egress", "1.1.1.1", "2606:4700:4700::1111", 443), "egress")
    # IPv4: no route; IPv6: no source address (no device but a down lo)
    assert got["tcp4"] == got["udp4-sendto"] == "ENETUNREACH", got
    assert got["tcp6"] == got["udp6-sendto"] == "EADDRNOTAVAIL", got
    lines = ctx.probe("ls", "/sys/class/net")
    assert all("eth" not in ln for ln in lines), lines


@probe("c-linger", MICROVM_COLUMNS)
def test_c_linger_microvm(ctx):
    """A command's timeout ends its processes; the sandbox's kill ends QEMU."""
    r = ctx.run(["sh", "-c", "wr-probe linger 300; wr-probe sleep 100"], timeout=2)
    assert r.reason == "timeout", r
    sid = ctx.sb.sandbox_id
    assert ctx.sb.kill()
    ctx.made.remove(ctx.sb)

    deadline = time.time() + 15
    while time.time() < deadline:
        left = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if sid.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                    left.append(p)
            except OSError:
                pass
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"QEMU of {sid} outlived its kill: {left}"
