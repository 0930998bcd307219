"""Catalog sections A and B on the VM tiers (microvm, vm; TCG here), as
uid 0 and uid 1000 inside the guest, through the public API.

One booted guest per tier for the whole session (conftest.Guests): the vm
tier boots a stock Debian disk (minutes under TCG), the microVM the store's
EROFS image. wr-probe is baked into the microVM's image and written into
the Debian guest through the files API. Each probe asserts the guest
kernel's exact outcome (guestexpect.py: the guest's root holds every
capability of its own kernel) and then the host-side invariants
(Guest.host_check: the same QEMU in its cgroup with its memory, pids and CPU
bounds, under them; the daemon answering), plus the probe's own (the
store's image digest, host files, canaries in every output).
"""
import os
import time

from catalog import GUEST_COLUMNS
from conftest import BUILD, enc, sha256_file
from guestexpect import (GUEST_CORE, GUEST_DEVICES, GUEST_DEVICES_TIER, GUEST_EXTENT,
                         GUEST_EXTENT_TIER, GUEST_MISC, GUEST_READ, GUEST_RELEASE,
                         GUEST_RELEASE_OTHER, GUEST_SYS, GUEST_SYS_TIER, want)
from redlib import parse, probe, unesc
from test_a_production import hunt

HOST_ONLY = ("warrend", "warren-init", "warren-zygote", "pytest")
HUNTS = {}  # (tier, uid) -> the hunt of / (a-log-hunt; a-kpage, f-token-steal)


def lines_of(ctx, script, timeout=120):
    """A shell snippet in the guest as the column's uid: its wr-probe lines
    (the probes must have run: output, exit 0)."""
    r = ctx.run(["sh", "-c", script], timeout=timeout)
    assert r.reason == "exited" and r.exit_code == 0 and r.stdout.strip(), r
    return [ln for ln in r.stdout.splitlines() if ln.strip()]


def sys_outcomes(ctx, names):
    got = {}
    for ln in lines_of(ctx, "for n in " + " ".join(names) + "; do wr-probe sys $n; done"):
        subj, outcome, _ = parse(ln)
        got[subj] = outcome
    return got


def expect_sys(ctx, names):
    got = sys_outcomes(ctx, names)
    exp = {n: want(GUEST_SYS, n, ctx.tier, ctx.uid, GUEST_SYS_TIER) for n in names}
    assert got == exp, (ctx.col, {n: (got.get(n), exp[n]) for n in names if got.get(n) != exp[n]})
    ctx.g().host_check(ctx.row)


def full_hunt(ctx):
    key = (ctx.tier, ctx.uid)
    if key not in HUNTS:
        kv, _ = hunt(ctx, secs=240 if ctx.tier == "vm" else 120)
        HUNTS[key] = kv
    return HUNTS[key]


def no_route(ctx, outcome, addr):
    """What a connect to a host address gets in the guest: with no network
    device, the kernel's exact errno; with one (the vm tier's network, being
    added on another branch), never a connection."""
    if ctx.g().nic is None:
        ctx.g().nic = ctx.g().has_nic()
    if ctx.g().nic:
        return outcome not in ("ok", None)
    if ":" in addr:
        return outcome == "ENETUNREACH"  # lo is up in both guests: ::1, no route
    return outcome == "ENETUNREACH"


# ---------------------------------------------------------------- A

@probe("a-log-hunt", GUEST_COLUMNS)
def test_a_log_hunt_guest(ctx):
    kv = full_hunt(ctx)
    assert kv["done"] == "1", f"the walk did not finish: {kv}"
    assert int(kv["files"]) > 100, f"too little walked to mean anything: {kv}"
    assert kv["nhits"] == "0", [unesc(h) for h in kv["hits"].split(",") if h]
    names = [unesc(n) for n in kv["names"].split(",") if n]
    assert not [n for n in names if "wr-rt-" in n], names  # the host's planted log
    # the guest's own kernel: no host process, no other sandbox's
    for ln in ctx.probe("procwalk")[1:]:
        comm = unesc(parse(ln)[2].get("comm", ""))
        assert comm not in HOST_ONLY and not comm.startswith("qemu-system"), ln
    for f in ("/dev/kmsg", "/proc/kmsg"):
        got = parse(ctx.probe("read", f)[0])[1]
        # root reads the guest's own log; a non-blocking read that finds
        # no record at that moment is EAGAIN (still the guest's, not ours)
        assert got == want(GUEST_READ, f, ctx.tier, ctx.uid) or \
            (ctx.uid == 0 and got == "EAGAIN"), (f, got)
    expect_sys(ctx, ["syslog"])


@probe("a-rpc-forge", GUEST_COLUMNS)
def test_a_rpc_forge_guest(ctx):
    rt = ctx.rt
    for path in (str(rt.d.sock), "/run/warren/warren.sock", "/var/run/warren/warren.sock"):
        assert ctx.probe("forge", "unix", path)[0] == "forge unix errno=ENOENT", path
    # the guest's loopback is its own: nothing of the daemon there (the
    # lo is up in both guests, with nothing listening)
    lo = parse(ctx.probe("forge", "tcp", "127.0.0.1", rt.d.port)[0])[1]
    assert lo == "ECONNREFUSED", lo
    for addr in rt.v4 + rt.v6 + ["10.0.2.2"]:
        outcome = parse(ctx.probe("forge", "tcp", addr, rt.d.port)[0])[1]
        assert no_route(ctx, outcome, addr), (addr, outcome)
    _, _, ab = parse(ctx.probe("abstract", *[enc(n) for n in rt.abstract])[0])
    assert ab["connected"] == "0", ab
    ctx.g().host_check(ctx.row)


def _restore(sb, path, data):
    sb.files.write(path, data, mode=0o755)
    assert sb.files.read(path, format="bytes") == data


@probe("a-bin-overwrite", GUEST_COLUMNS)
def test_a_bin_overwrite_guest(ctx):
    g = ctx.g()
    w = want(GUEST_MISC, "write /bin/sh", ctx.tier, ctx.uid)
    if ctx.tier == "microvm":
        # root of the guest may change its own copy (the VM's writable
        # layer): on a VM of its own, the session's keeps its shell
        sb = ctx.fresh_sandbox() if ctx.uid == 0 else ctx.sandbox()
        got = parse(ctx.probe("write", "/bin/busybox", 64, sb=sb)[0])[1]
        assert got == w, got
        fresh = ctx.fresh_sandbox()
        r = fresh.commands.run(["/bin/busybox", "true"], timeout=60)
        assert r.exit_code == 0, r  # the next VM from the image has the original
    else:
        sb = ctx.sandbox()
        # /bin/sh is dash; keep both shells to put back (the files API
        # needs no shell in the guest: qemu-guest-agent's file calls)
        keep = {p: sb.files.read(p, format="bytes") for p in ("/usr/bin/dash", "/usr/bin/bash")}
        try:
            # /bin/sh last: the vm tier runs each command through sh
            for target in ("/bin/bash", "/bin/sh"):
                got = parse(ctx.probe("write", target, 64)[0])[1]
                assert got == w, (target, got)
            if ctx.uid == 0:
                assert sb.files.read("/usr/bin/dash", format="bytes") == b"x" * 64
        finally:
            for p, data in keep.items():
                if sb.files.read(p, format="bytes") != data:
                    _restore(sb, p, data)
        assert ctx.run(["sh", "-c", "echo back"]).stdout == "back\n"
    # the image in the store is untouched: the guest wrote its overlay
    assert sha256_file(g.base) == g.base_digest, "the store's image changed"
    g.host_check(ctx.row)


@probe("a-extent-swap", GUEST_COLUMNS)
def test_a_extent_swap_guest(ctx):
    before = ctx.sandbox().files.read("/etc/passwd", format="bytes")
    lines = ctx.probe("extent-swap", "/etc/passwd")
    assert "own=ok protected=ok" in lines[0], lines[0]
    got = ctx.outcomes(lines, "extent-swap")
    got.update({n: parse(ln)[1] for n in ("XFS_IOC_SWAPEXT-IO", "XFS_IOC_EXCHANGE_RANGE-IOWR",
                                          "FICLONE-hibits") for ln in ctx.probe("ioctl", n)})
    exp = {n: want(GUEST_EXTENT, n, ctx.tier, ctx.uid, GUEST_EXTENT_TIER) for n in GUEST_EXTENT}
    got = {n: v for n, v in got.items() if not n.startswith("setup")}
    assert got == exp, {n: (got.get(n), exp[n]) for n in exp if got.get(n) != exp[n]}
    assert ctx.sandbox().files.read("/etc/passwd", format="bytes") == before
    ctx.g().host_check(ctx.row)


@probe("a-kpage", GUEST_COLUMNS)
def test_a_kpage_guest(ctx):
    for f in ("/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount"):
        _, outcome, kv = parse(ctx.probe("read", f)[0])
        assert outcome == want(GUEST_READ, f, ctx.tier, ctx.uid), (f, outcome)
        if outcome == "ok":
            assert int(kv["bytes"]) > 0, kv  # the guest's own pages
    # the walk over / (with /proc and /sys) finished; the guest and host go on
    assert full_hunt(ctx)["done"] == "1"
    assert ctx.run(["wr-probe", "exit", "0"]).exit_code == 0
    ctx.g().host_check(ctx.row)


@probe("a-output-flood", GUEST_COLUMNS)
def test_a_output_flood_guest(ctx):
    rt = ctx.rt
    rss0 = rt.daemon_rss_kib()
    cap = 1 << 20
    for args in (["yes"], ["yes", str(10 * 10 ** 9)]):  # lines; one 10 GB line
        r = ctx.run(["wr-probe", *args], output_cap=cap, timeout=30)
        assert r.stdout_truncated and len(r.stdout.encode()) == cap, (r.reason, len(r.stdout))
        # The microVM's agent streams on and the host discards past the cap
        # (src/agent/guest/serve.c: backpressure, never a guest-side buffer);
        # the vm tier's output file (the guest's tmpfs) is left unread past
        # the cap. Either way the command is bounded by its timeout at worst.
        assert r.reason in ("killed", "exited", "timeout"), (r.reason, r.stderr[-200:])
    grew = rt.daemon_rss_kib() - rss0
    assert grew < 256 * 1024, f"daemon RSS grew {grew} KiB"
    assert ctx.run(["wr-probe", "exit", "0"]).exit_code == 0
    ctx.g().host_check(ctx.row)


@probe("a-portscan", GUEST_COLUMNS)
def test_a_portscan_guest(ctx):
    t0 = time.time()
    for addr in (ctx.rt.v4[:1] or ["10.0.2.2"]):
        _, _, kv = parse(ctx.probe("portscan", addr, 1, 65535, 300, timeout=240)[0])
        assert kv["open"] == "0", (addr, kv)
        if no_route(ctx, "ENETUNREACH", addr) and not ctx.g().nic:
            assert kv["unreach"] == "65535", (addr, kv)
    assert time.time() - t0 < 400, "the scan should fail fast"
    ctx.g().host_check(ctx.row)


@probe("a-proxy-fetch", GUEST_COLUMNS)
def test_a_proxy_fetch_guest(ctx):
    for addr, port in [("151.101.1.69", 443), ("140.82.112.3", 22), ("1.1.1.1", 8080)] + \
            [(a, p) for a in ctx.rt.v4[:1] for p in (3128, 8080, 5000)]:
        outcome = parse(ctx.probe("connect-tcp", addr, port)[0])[1]
        assert no_route(ctx, outcome, addr), (addr, port, outcome)
    ctx.g().host_check(ctx.row)


@probe("a-fd-steal", GUEST_COLUMNS)
def test_a_fd_steal_guest(ctx):
    lines = ctx.probe("procwalk")
    me = int(parse(lines[0])[2]["self"])
    others = 0
    for ln in lines[1:]:
        _, _, p = parse(ln)
        comm = unesc(p["comm"])
        assert comm not in HOST_ONLY and not comm.startswith("qemu-system"), ln
        # no running binary is writable through /proc/<pid>/exe, by anyone
        assert p["exe_write"] in ("EACCES", "ETXTBSY", "ENOENT"), ln
        if int(p["pid"]) != me and ctx.uid != 0 and int(p["uid"]) != ctx.uid:
            others += 1
            assert p["fd0"] in ("EACCES", "ENOENT"), ln
            assert p["environ"] in ("EACCES", "ENOENT"), ln
            assert p["ptrace"] == "EPERM" and p["vmread"] in ("EPERM", "ESRCH"), ln
    if ctx.uid != 0:
        assert others >= 1, lines[:3]  # PID 1 at least
    expect_sys(ctx, ["process_vm_readv", "pidfd_getfd", "ptrace"])


@probe("a-fd-inherit", GUEST_COLUMNS)
def test_a_fd_inherit_guest(ctx):
    r = ctx.run(["sh", "-c", "wr-probe fdwalk; exec wr-probe fdwalk"])
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("fdwalk")]
    assert len(lines) == 2, r
    for ln in lines:
        _, outcome, kv = parse(ln)
        assert outcome == "ok" and kv.pop("count") == "3" and sorted(kv) == ["0", "1", "2"], ln
        for fd, v in kv.items():
            target, up = (unesc(x) for x in v.split("|", 1))
            # pipes of the microVM's agent; the vm tier's output files in
            # the guest (vm_exec.c: qemu-guest-agent has no streaming)
            assert target == "/dev/null" or target.startswith(
                ("pipe:", "/run/warren-exec/")), (fd, target)
            assert up == "errno=ENOTDIR", (fd, up)
    ctx.g().host_check(ctx.row)


# ---------------------------------------------------------------- B

@probe("b-proc-self-exe", GUEST_COLUMNS)
def test_b_proc_self_exe_guest(ctx):
    for ln in ctx.probe("procwalk")[1:]:
        assert parse(ln)[2]["exe_write"] in ("EACCES", "ETXTBSY", "ENOENT"), ln
    # nothing of the host's runtime is there to write, and it is unchanged
    for b in ("warrend", "warren-init", "warren-zygote"):
        assert sha256_file(BUILD / b) == ctx.rt.digests[b], f"{b} changed"
    ctx.g().host_check(ctx.row)


@probe("b-open-by-handle", GUEST_COLUMNS)
def test_b_open_by_handle_guest(ctx):
    expect_sys(ctx, ["open_by_handle_at", "name_to_handle_at"])


def _host_release_agents():
    out = {}
    for c in os.listdir("/sys/fs/cgroup"):
        p = f"/sys/fs/cgroup/{c}/release_agent"
        if os.path.exists(p):
            out[p] = open(p).read()
    return out


@probe("b-release-agent", GUEST_COLUMNS)
def test_b_release_agent_guest(ctx):
    host = _host_release_agents()
    got = ctx.outcomes(ctx.probe("release-agent"), "release-agent")
    for k, v in got.items():
        exp = want(GUEST_RELEASE, k, ctx.tier, ctx.uid) if k in GUEST_RELEASE \
            else GUEST_RELEASE_OTHER
        assert v == exp, (k, v, exp)
    assert _host_release_agents() == host
    ctx.g().host_check(ctx.row)


@probe("b-core-pattern", GUEST_COLUMNS)
def test_b_core_pattern_guest(ctx):
    host = open("/proc/sys/kernel/core_pattern").read()
    got = ctx.outcomes(ctx.probe("core-pattern"), "core-pattern")
    assert got == {k: want(GUEST_CORE, k, ctx.tier, ctx.uid) for k in GUEST_CORE}, got
    assert open("/proc/sys/kernel/core_pattern").read() == host  # the guest's own changed
    ctx.g().host_check(ctx.row)


@probe("b-sysrq", GUEST_COLUMNS)
def test_b_sysrq_guest(ctx):
    from conftest import kernel_log
    seq, _ = kernel_log()
    _, outcome, _ = parse(ctx.probe("write", "/proc/sysrq-trigger", 0)[0])
    assert outcome == ("ok" if ctx.uid == 0 else "EACCES"), outcome  # 0 bytes: no command
    for f in ("/proc/kcore", "/proc/keys", "/proc/timer_list"):
        assert parse(ctx.probe("read", f)[0])[1] == want(GUEST_READ, f, ctx.tier, ctx.uid), f
    _, trouble = kernel_log(seq)
    assert not trouble, trouble[:3]
    ctx.g().host_check(ctx.row)


@probe("b-mount-family", GUEST_COLUMNS)
def test_b_mount_family_guest(ctx):
    expect_sys(ctx, ["mount", "umount2", "fsopen", "fsmount", "fspick", "open_tree",
                     "move_mount", "mount_setattr", "pivot_root", "chroot"])


@probe("b-userns", GUEST_COLUMNS)
def test_b_userns_guest(ctx):
    _, outcome, st = parse(ctx.probe("status")[0])
    assert outcome == "ok" and st["uid"] == ",".join([str(ctx.uid)] * 4), st
    # the guest's root holds the guest's capabilities; uid 1000 none
    assert (st["capeff"] != "0000000000000000") == (ctx.uid == 0), st
    expect_sys(ctx, ["unshare", "setns", "clone-newuser", "clone-newns", "clone-newpid",
                     "clone-newnet", "clone-newcgroup", "clone3", "fork"])


@probe("b-keyring", GUEST_COLUMNS)
def test_b_keyring_guest(ctx):
    expect_sys(ctx, ["keyctl", "add_key", "request_key"])


@probe("b-ptrace", GUEST_COLUMNS)
def test_b_ptrace_guest(ctx):
    expect_sys(ctx, ["ptrace"])


@probe("b-uffd", GUEST_COLUMNS)
def test_b_uffd_guest(ctx):
    f = "/dev/userfaultfd"
    assert parse(ctx.probe("read", f)[0])[1] == want(GUEST_READ, f, ctx.tier, ctx.uid)
    expect_sys(ctx, ["userfaultfd"])


@probe("b-io-uring", GUEST_COLUMNS)
def test_b_io_uring_guest(ctx):
    expect_sys(ctx, ["io_uring_setup", "io_uring_enter", "io_uring_register"])


@probe("b-bpf-perf", GUEST_COLUMNS)
def test_b_bpf_perf_guest(ctx):
    expect_sys(ctx, ["bpf", "perf_event_open"])


@probe("b-cgroupfs", GUEST_COLUMNS)
def test_b_cgroupfs_guest(ctx):
    # the guest's cgroupfs is its own kernel's: no path of the host's
    r = ctx.run(["cat", "/proc/self/cgroup"])
    assert r.exit_code == 0 and r.stdout, r
    assert ctx.rt.d.cg_base not in r.stdout and "vm-" not in r.stdout, r.stdout
    got = ctx.outcomes(ctx.probe("release-agent"), "release-agent")
    w = want(GUEST_RELEASE, "write /sys/fs/cgroup/cgroup.procs", ctx.tier, ctx.uid)
    assert got["write /sys/fs/cgroup/cgroup.procs"] == w, got
    # QEMU's own bounds, read from the host, are unchanged (host_check)
    ctx.g().host_check(ctx.row)


@probe("b-clock", GUEST_COLUMNS)
def test_b_clock_guest(ctx):
    t0 = time.time()
    expect_sys(ctx, ["settimeofday", "clock_settime", "adjtimex", "clock_adjtime"])
    assert abs(time.time() - t0) < 600  # the host's clock is its own


@probe("b-mknod", GUEST_COLUMNS)
def test_b_mknod_guest(ctx):
    got = ctx.outcomes(ctx.probe("devices"), "devices")
    exp = {k: want(GUEST_DEVICES, k, ctx.tier, ctx.uid, GUEST_DEVICES_TIER)
           for k in GUEST_DEVICES}
    assert got == exp, {k: (got.get(k), exp[k]) for k in exp if got.get(k) != exp[k]}
    ctx.g().host_check(ctx.row)


@probe("b-modules", GUEST_COLUMNS)
def test_b_modules_guest(ctx):
    expect_sys(ctx, ["init_module", "finit_module", "delete_module", "kexec_load",
                     "kexec_file_load", "reboot"])
