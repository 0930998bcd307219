"""Catalog section A: what agents were seen doing in production."""
import os
import time

import warren
from conftest import enc, sha256_file, tree_digest
from redlib import net, parse, probe, unesc


def hunt(ctx, root="/", secs=90, extra_tokens=(), via_shell=False, missing_ok=False, **kw):
    toks = list(ctx.rt.secrets().values()) + list(extra_tokens)
    args = ["hunt", root, secs] + [enc(t) for t in toks]
    if via_shell:
        # a shell parent: its /proc entry (environ, cmdline) is hunted too
        lines = ctx.run(["sh", "-c", "wr-probe " + " ".join(str(a) for a in args)],
                        timeout=secs + 30, **kw).stdout.splitlines()
        assert lines and lines[-1].startswith("hunt ok"), lines
    else:
        lines = ctx.probe(*args, timeout=secs + 30, **kw)
    _, outcome, kv = parse(lines[-1])
    assert outcome == "ok" or (missing_ok and outcome == "ENOENT"), lines
    return kv, toks


@probe("a-log-hunt")
def test_a_log_hunt(ctx):
    kv, toks = hunt(ctx)
    assert kv["done"] == "1", f"the walk did not finish: {kv}"
    assert int(kv["files"]) > 100, f"too little walked to mean anything: {kv}"
    hits = [unesc(h) for h in kv["hits"].split(",") if h]
    assert kv["nhits"] == "0", f"secrets readable: {hits}"
    names = [unesc(n) for n in kv["names"].split(",") if n]
    leaked = [n for n in names if "wr-rt-" in n or n.startswith("/var/log")]
    assert not leaked, f"host or daemon files visible: {leaked}"
    # only the sandbox's own processes
    lines = ctx.probe("procwalk")
    _, _, pk = parse(lines[0])
    assert int(pk["count"]) <= 4, lines[0]
    for ln in lines[1:]:
        _, _, p = parse(ln)
        assert unesc(p["comm"]) in ("warren-init", "wr-probe", "sh", "warren-zygote"), ln
    assert ctx.probe("read", "/dev/kmsg")[0].startswith("read errno=ENOENT")
    kmsg = parse(ctx.probe("read", "/proc/kmsg")[0])[1]
    assert kmsg in ("EACCES", "EPERM", "ENOENT"), kmsg
    assert ctx.sys("syslog") == "EPERM"
    ctx.expect_event("seccomp", "syslog")


@probe("a-rpc-forge")
def test_a_rpc_forge(ctx):
    rt = ctx.rt
    for path in (str(rt.d.sock), "/run/warren/warren.sock", "/var/run/warren/warren.sock"):
        lines = ctx.probe("forge", "unix", path)
        assert lines[0] == "forge unix errno=ENOENT", (path, lines)
    # the daemon's TCP port: on the sandbox's own loopback nothing listens;
    # every host address is unreachable (mode none: no route out)
    lines = ctx.probe("forge", "tcp", "127.0.0.1", rt.d.port)
    assert lines[0] == "forge tcp errno=ECONNREFUSED", lines
    for addr in rt.v4 + rt.v6:
        lines = ctx.probe("forge", "tcp", addr, rt.d.port)
        assert lines[0] == f"forge tcp errno={net('connect')}", (addr, lines)
    # no socket of the daemon anywhere in the tree, none in /proc/net/unix
    for root in ("/run", "/var/run", "/tmp"):
        kv, _ = hunt(ctx, root, 20, missing_ok=True)
        assert kv["nsockets"] == "0", (root, kv)
    _, _, ab = parse(ctx.probe("abstract", *[enc(n) for n in rt.abstract])[0])
    assert ab["seen"] == "0" and ab["connected"] == "0", ab


@probe("a-bin-overwrite")
def test_a_bin_overwrite(ctx):
    rt = ctx.rt
    before = (tree_digest(rt.image_dir), sha256_file(rt.image_erofs))
    marker = f"/tmp/wr-rt-pwned-{int(time.time() * 1000)}"
    results = {}
    for target in ("/bin/sh", "/bin/bash", "/bin/busybox"):
        results[target] = parse(ctx.probe("write", target, 64)[0])[1]
    if ctx.container and ctx.uid == 0:
        # root of the sandbox may change its own copy (the upper layer)
        assert results == {"/bin/sh": "ok", "/bin/bash": "ok", "/bin/busybox": "ok"}, results
        # and a script the host would run, if the host ran sandbox files
        ctx.sb.files.write("/bin/sh", f"#!/bin/busybox sh\n/bin/busybox touch {marker}\n",
                           mode=0o755)
        r = ctx.run("echo still-here", user=0)
        assert "still-here" not in r.stdout  # its own broken shell, inside
    elif ctx.container:
        assert results == {"/bin/sh": "EACCES", "/bin/bash": "EACCES",
                           "/bin/busybox": "EACCES"}, results
    else:
        assert set(results.values()) == {"EROFS"}, results
    # the image is untouched, and a new sandbox runs the original shell
    assert (tree_digest(rt.image_dir), sha256_file(rt.image_erofs)) == before
    assert rt.digests["image-tree"] == before[0]
    with warren.Sandbox.create(image="busybox", timeout=120, **rt.alice) as fresh:
        r = fresh.commands.run(["/bin/sh", "-c", "echo original"])
        assert r.stdout == "original\n", r
    r = warren.functions.call("busybox", ["/bin/sh", "-c", "echo original"], **rt.alice)
    assert r.stdout == "original\n", r
    # the host never executed the sandbox's file
    assert not os.path.exists(marker)


@probe("a-extent-swap")
def test_a_extent_swap(ctx):
    want = {"FICLONE-into-protected", "FICLONERANGE-into-protected",
            "FIDEDUPERANGE-into-protected", "XFS_IOC_SWAPEXT", "XFS_IOC_EXCHANGE_RANGE",
            "FICLONE-from-protected", "FIBMAP"}
    before = ctx.run(["wr-probe", "read", "/etc/passwd"]).stdout
    lines = ctx.probe("extent-swap", "/etc/passwd")
    got = ctx.outcomes(lines, "extent-swap")
    assert "own=ok protected=ok" in lines[0], lines[0]
    for name in want:
        assert got.get(name) == "EPERM", (name, lines)
    assert ctx.run(["wr-probe", "read", "/etc/passwd"]).stdout == before
    # the variants with other size/direction bits and junk in the upper half
    for name in ("XFS_IOC_SWAPEXT-IO", "XFS_IOC_EXCHANGE_RANGE-IOWR", "FICLONE-hibits"):
        assert parse(ctx.probe("ioctl", name)[0])[1] == "EPERM", name
    ctx.expect_event("seccomp", "ioctl")


@probe("a-kpage")
def test_a_kpage(ctx):
    for f in ("/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount"):
        subj, outcome, kv = parse(ctx.probe("read", f)[0])
        if ctx.container:
            assert outcome == "ok" and kv["bytes"] == "0", (f, outcome, kv)
        else:  # the call's /proc shows only its own processes (subset=pid)
            assert outcome == "ENOENT", (f, outcome, kv)
    # grep -r over / including /proc and /sys finishes; the kernel stays up
    kv, _ = hunt(ctx, "/", 120)
    assert kv["done"] == "1", kv
    assert ctx.run(["wr-probe", "exit", "0"]).exit_code == 0


@probe("a-output-flood")
def test_a_output_flood(ctx):
    rt = ctx.rt
    rss0 = rt.daemon_rss_kib()
    disk0 = rt.disk_bytes(rt.d.root)
    cap = 1 << 20
    t0 = time.time()
    r = ctx.run(["wr-probe", "yes"], output_cap=cap, timeout=60)
    assert r.stdout_truncated and len(r.stdout.encode()) == cap, (r.reason, len(r.stdout))
    assert r.reason == "exited" and "yes errno=EPIPE" in r.stderr, (r.reason, r.stderr[-200:])
    # one 10 GB line, no newline
    r = ctx.run(["wr-probe", "yes", str(10 * 10 ** 9)], output_cap=cap, timeout=60)
    assert r.stdout_truncated and len(r.stdout.encode()) == cap
    assert "yes errno=EPIPE" in r.stderr, r.stderr[-200:]
    assert time.time() - t0 < 60
    if ctx.container:
        # a background command floods for 3 s: its buffer is capped too
        h = ctx.sb.commands.run(["wr-probe", "yes"], background=True, output_cap=cap,
                                timeout=3)
        res = h.wait()
        assert res.stdout_truncated and len(res.stdout.encode()) <= cap
    grew_rss = rt.daemon_rss_kib() - rss0
    grew_disk = rt.disk_bytes(rt.d.root) - disk0
    assert grew_rss < 256 * 1024, f"daemon RSS grew {grew_rss} KiB"
    assert grew_disk < 16 << 20, f"daemon disk grew {grew_disk} bytes"


def _scan(ctx, addr, lo=1, hi=65535, ms=300):
    _, _, kv = parse(ctx.probe("portscan", addr, lo, hi, ms, timeout=180)[0])
    return kv


@probe("a-portscan")
def test_a_portscan(ctx):
    rt = ctx.rt
    t0 = time.time()
    # the sandbox's own loopback: nothing of the host listens there
    kv = _scan(ctx, "127.0.0.1")
    assert kv["open"] == "0" and kv["timeout"] == "0", kv
    # host addresses, a gateway guess and neighbours: no route (mode none)
    targets = rt.v4[:2] + rt.v6[:1] + ["10.0.0.1", "172.17.0.1", "192.168.1.1"]
    for addr in targets:
        kv = _scan(ctx, addr)
        assert kv["open"] == "0", (addr, kv)
        if net("connect") == "ENETUNREACH":
            assert kv["unreach"] == "65535", (addr, kv)
    assert time.time() - t0 < 120, "the scan should fail fast"


@probe("a-proxy-fetch")
def test_a_proxy_fetch(ctx):
    rt = ctx.rt
    # a module proxy, a mirror, an allowed host's raw IP on another port
    for addr, port in [("151.101.1.69", 443), ("140.82.112.3", 22), ("1.1.1.1", 8080)] + \
            [(a, p) for a in rt.v4[:1] for p in (3128, 8080, 5000)]:
        lines = ctx.probe("connect-tcp", addr, port)
        assert parse(lines[0])[1] == net("connect"), (addr, port, lines)


@probe("a-fd-steal")
def test_a_fd_steal(ctx):
    if ctx.container:
        # a sibling of the other uid to steal from
        sb = ctx.sandbox()
        sb.commands.run(["wr-probe", "sleep", "60"], background=True, user=ctx.other_uid)
        time.sleep(0.3)
    lines = ctx.probe("procwalk")
    _, _, head = parse(lines[0])
    me = int(head["self"])
    others = 0
    for ln in lines[1:]:
        _, _, p = parse(ln)
        pid = int(p["pid"])
        # seccomp refuses these for every process, own or not
        assert p["getfd"] in ("EPERM", "skip") and p["vmread"] == "EPERM", ln
        if pid == me:
            continue
        assert p["ptrace"] == "EPERM", ln
        if pid == 1 or int(p["uid"]) != ctx.uid:
            others += 1
            assert p["fd0"] in ("EACCES", "ENOENT"), ln
            assert p["mem"] in ("EACCES", "ENOENT"), ln
            assert p["environ"] in ("EACCES", "ENOENT"), ln
            assert p["exe_write"] in ("EACCES", "ETXTBSY", "ENOENT"), ln
            assert not unesc(p["exe"]).startswith("/"), f"host path of an exe: {ln}"
    if ctx.container:
        assert others >= 2, lines  # PID 1 and the sibling
        # nor signal them: Landlock scopes signals to the command's domain
        _, outcome, _ = parse(ctx.probe("kill", 1, "KILL")[0])
        assert outcome == "EPERM", outcome
        assert ctx.sb.is_running()
        if ctx.uid == 0:
            # (as uid 1000 the kernel's own uid check refuses first: no
            # platform layer involved, no event)
            ctx.expect_event("landlock", "scope.signal")
    ctx.expect_event("seccomp", "process_vm_readv")
    if ctx.container:
        ctx.expect_event("seccomp", "ptrace")


@probe("a-fd-inherit")
def test_a_fd_inherit(ctx):
    r = ctx.run(["sh", "-c", "wr-probe fdwalk; exec wr-probe fdwalk"])
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("fdwalk")]
    assert len(lines) == 2, r
    for ln in lines:
        _, outcome, kv = parse(ln)
        assert outcome == "ok" and kv.pop("count") == "3", ln
        assert sorted(kv) == ["0", "1", "2"], ln
        for fd, v in kv.items():
            target, up = (unesc(x) for x in v.split("|", 1))
            assert target in ("/dev/null",) or target.startswith(("pipe:", "socket:",
                                                                  "/memfd:")), (fd, target)
            assert up == "errno=ENOTDIR", (fd, up)
