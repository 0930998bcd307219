"""Catalog section B: classic container escapes."""
import os

from conftest import BUILD, sha256_file
from redlib import parse, probe


def refused(ctx, names, errno="EPERM", event=True):
    """Each `wr-probe sys NAME` fails with errno, and (for seccomp
    refusals) the audit has its event."""
    got = {n: ctx.sys(n) for n in names}
    assert got == {n: errno for n in names}, got
    if event:
        for n in names:
            ctx.expect_event("seccomp", n.split("-")[0])


@probe("b-proc-self-exe")
def test_b_proc_self_exe(ctx):
    rt = ctx.rt
    # the platform execs /proc/self/exe-like targets: Landlock refuses any
    # file outside the sandbox root (the runtime's own binaries)
    for target in ("/proc/self/exe", "/proc/1/exe"):
        r = ctx.run([target])
        assert r.reason == "start_failed" and r.exit_code in (126, 127), (target, r)
    lines = ctx.probe("procwalk")
    for ln in lines[1:]:
        _, _, p = parse(ln)
        assert p["exe_write"] in ("EACCES", "ETXTBSY", "ENOENT"), ln
    for b in ("warrend", "warren-init", "warren-zygote"):
        assert sha256_file(BUILD / b) == rt.digests[b], f"{b} changed"
    e = ctx.expect_event("landlock", "fs.execute")
    if e is not None:
        # the refused file is the runtime's binary on the host: its path,
        # device and inode are hidden (the kernel's record names the host
        # path), with the reason; a path is shown only when it resolves
        # beneath the sandbox's root to the record's inode
        what = e.get("what") or {}
        assert e.get("subject") is None and "path" not in what, e
        assert "dev" not in what and "ino" not in what, e
        why = ["not beneath the sandbox's root"]
        if not ctx.container:  # a call's processes may be gone already
            why.append("the sandbox was gone before the path could be checked")
        assert what.get("path_hidden") in why, e


@probe("b-open-by-handle")
def test_b_open_by_handle(ctx):
    refused(ctx, ["open_by_handle_at", "name_to_handle_at"])


@probe("b-release-agent")
def test_b_release_agent(ctx):
    got = ctx.outcomes(ctx.probe("release-agent"), "release-agent")
    assert got["unshare-user-mnt-cgroup"] == "EPERM", got
    assert got["mount-cgroup-v1"] == "EPERM" and got["fsopen-cgroup"] == "EPERM", got
    writes = {k: v for k, v in got.items() if k.startswith("write ")}
    assert writes and set(writes.values()) <= {"ENOENT", "EROFS", "EACCES"}, writes
    ctx.expect_event("seccomp", "unshare")


@probe("b-core-pattern")
def test_b_core_pattern(ctx):
    got = ctx.outcomes(ctx.probe("core-pattern"), "core-pattern")
    assert got["write-proc"] in ("EROFS", "EACCES", "ENOENT"), got
    assert got["mount-proc"] == got["fsopen-proc"] == got["open_tree-proc"] == "EPERM", got
    ctx.expect_event("seccomp", "mount")
    ctx.expect_event("seccomp", "fsopen")


@probe("b-sysrq")
def test_b_sysrq(ctx):
    # a file this kernel does not have is absent inside too (ENOENT);
    # one it has is masked: an empty read-only file
    _, outcome, _ = parse(ctx.probe("write", "/proc/sysrq-trigger", 1)[0])
    if ctx.container and os.path.exists("/proc/sysrq-trigger"):
        assert outcome in ("EROFS", "EACCES"), outcome
    else:
        assert outcome in ("ENOENT", "EROFS", "EACCES"), outcome
    for f in ("/proc/kcore", "/proc/keys", "/proc/timer_list"):
        _, outcome, kv = parse(ctx.probe("read", f)[0])
        if ctx.container and os.path.exists(f):
            assert outcome == "ok" and kv["bytes"] == "0", (f, outcome, kv)
        else:
            assert outcome == "ENOENT" or (outcome == "ok" and kv["bytes"] == "0"), \
                (f, outcome, kv)


@probe("b-mount-family")
def test_b_mount_family(ctx):
    refused(ctx, ["mount", "umount2", "fsopen", "fsmount", "fspick", "open_tree",
                  "move_mount", "mount_setattr", "pivot_root", "chroot"])


@probe("b-userns")
def test_b_userns(ctx):
    # no capability in any set, no_new_privs, the seccomp filter in force
    _, outcome, st = parse(ctx.probe("status")[0])
    assert outcome == "ok", st
    for k in ("capinh", "capprm", "capeff", "capbnd", "capamb"):
        assert st[k] == "0000000000000000", (k, st)
    assert st["nonewprivs"] == "1" and st["seccomp"] == "2", st
    assert st["uid"] == ",".join([str(ctx.uid)] * 4), st
    if ctx.container:
        # a setuid-root copy of a binary (made through the files API as the
        # sandbox's root) stays inert: no_new_privs
        sb = ctx.sandbox()
        sb.files.write("/tmp/suid-probe", sb.files.read("/usr/bin/wr-probe", format="bytes"),
                       mode=0o4755)
        if not sb.files.get_info("/tmp/suid-probe").mode & 0o4000:
            # the files API drops set-id bits: the sandbox's root sets it
            assert ctx.run(["chmod", "4755", "/tmp/suid-probe"], user=0).exit_code == 0
        info = sb.files.get_info("/tmp/suid-probe")
        assert info.mode & 0o4000 and info.uid == 0, info
        r = ctx.run(["/tmp/suid-probe", "status"])
        assert r.exit_code == 0 and r.stdout, r
        _, outcome, st = parse(r.stdout.splitlines()[0])
        assert outcome == "ok" and st["uid"] == ",".join([str(ctx.uid)] * 4), st
        assert st["capeff"] == "0000000000000000", st
    refused(ctx, ["unshare", "setns"])
    refused(ctx, ["clone-newuser", "clone-newns", "clone-newpid", "clone-newnet",
                  "clone-newcgroup"], event=False)
    ctx.expect_event("seccomp", "clone")
    # glibc falls back from clone3 on ENOSYS: not a refusal, no event needed
    assert ctx.sys("clone3") == "ENOSYS"
    assert ctx.sys("fork") == "ok"


@probe("b-keyring")
def test_b_keyring(ctx):
    refused(ctx, ["keyctl", "add_key", "request_key"])


@probe("b-ptrace")
def test_b_ptrace(ctx):
    assert ctx.sys("ptrace", 1) == "EPERM"
    if ctx.container:
        h = ctx.sandbox().commands.run(["wr-probe", "sleep", "30"], background=True,
                                       user=ctx.uid)
        assert ctx.sys("ptrace", h.pid) == "EPERM"
    ctx.expect_event("seccomp", "ptrace")


@probe("b-uffd")
def test_b_uffd(ctx):
    refused(ctx, ["userfaultfd"])
    assert parse(ctx.probe("read", "/dev/userfaultfd")[0])[1] == "ENOENT"


@probe("b-io-uring")
def test_b_io_uring(ctx):
    refused(ctx, ["io_uring_setup", "io_uring_enter", "io_uring_register"])


@probe("b-bpf-perf")
def test_b_bpf_perf(ctx):
    refused(ctx, ["bpf", "perf_event_open"])


@probe("b-cgroupfs")
def test_b_cgroupfs(ctx):
    got = ctx.outcomes(ctx.probe("release-agent"), "release-agent")
    writes = {k: v for k, v in got.items() if k.startswith("write ")}
    assert set(writes.values()) <= {"ENOENT", "EROFS", "EACCES"}, writes
    # the cgroup namespace (a container's: PID 1's, rooted at the
    # sandbox's cgroup): "/" or our own leaf ("/cmd-N"), no host path
    r = ctx.run(["cat", "/proc/self/cgroup"])
    assert r.exit_code == 0 and r.stdout, r
    for line in r.stdout.splitlines():
        path = line.split(":", 2)[2]
        assert path.startswith("/") and ctx.rt.d.cg_base not in path, line
        assert "warren" not in path, line
    # nothing of other sandboxes: no cgroupfs inside at all
    _, outcome, kv = parse(ctx.probe("ls", "/sys/fs/cgroup")[0])
    assert outcome == "ENOENT" or kv.get("entries") == "0", (outcome, kv)


@probe("b-clock")
def test_b_clock(ctx):
    refused(ctx, ["settimeofday", "clock_settime", "adjtimex", "clock_adjtime"])


@probe("b-mknod")
def test_b_mknod(ctx):
    got = ctx.outcomes(ctx.probe("devices"), "devices")
    for k, v in got.items():
        if k.startswith("mknod-"):
            # the kernel refuses device nodes in a user namespace (EPERM);
            # in a call's read-only root, EROFS may come first
            assert v in (("EPERM",) if ctx.container else ("EPERM", "EROFS")), (k, v)
        else:
            assert v == "ENOENT", (k, v)


@probe("b-modules")
def test_b_modules(ctx):
    refused(ctx, ["init_module", "finit_module", "delete_module", "kexec_load",
                  "kexec_file_load", "reboot"])
