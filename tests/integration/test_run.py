"""`warren run` end to end: isolation facts observed inside, limits hit for
real, results observed from the host, and errors for bad input."""
import os
import re
import time

import pytest

from conftest import errno_of


def status_field(text, key):
    m = re.search(rf"^{key}:\s*(.*)$", text, re.M)
    assert m, f"{key} not in {text!r}"
    return m.group(1).strip()


@pytest.mark.parametrize("kind", ["dir", "erofs"])
def test_both_image_kinds_run(warren, kind):
    p = warren.run("--", "cat", "/etc/hostname", image=warren.images[kind], check=0)
    assert p.out.strip() == "warren"


def test_uid_map_and_user(warren):
    p = warren.run("--", "cat", "/proc/self/uid_map", check=0)
    inside, host, count = p.out.split()
    assert inside == "0" and count == "65536"
    assert int(host) >= 0x10000000 and (int(host) - 0x10000000) % 65536 == 0
    p = warren.run("--user", "1000", "--", "id", "-u", check=0)
    assert p.out.strip() == "1000"
    p = warren.run("--user", "1000:1001", "--", "id", "-g", check=0)
    assert p.out.strip() == "1001"


def test_uid_ranges_differ_between_live_sandboxes(warren):
    # two sandboxes alive at the same time get different host ranges
    import subprocess
    a = subprocess.Popen([str(warren.build / "warren"), "run", "--image", warren.images["dir"],
                          "--", "sh", "-c", "cat /proc/self/uid_map; sleep 2"],
                         env=warren.env, stdout=subprocess.PIPE)
    time.sleep(0.5)
    b = warren.run("--", "cat", "/proc/self/uid_map", check=0)
    out_a, _ = a.communicate(timeout=30)
    assert a.returncode == 0
    assert out_a.split()[1] != b.out.split()[1]


def test_pid1_is_warren_init(warren):
    p = warren.run("--", "sh", "-c", "cat /proc/1/comm; echo $$; ls /proc | grep -c '^[0-9]'",
                   check=0)
    comm, mypid, nprocs = p.out.split()
    assert comm == "warren-init"
    assert int(mypid) != 1
    # init, the shell, ls and grep: nothing of the host
    assert int(nprocs) <= 4


def test_hostname(warren):
    p = warren.run("--", "hostname", check=0)
    assert re.fullmatch(r"[0-9a-f]{16}", p.out.strip())
    p = warren.run("--hostname", "agent-7", "--", "hostname", check=0)
    assert p.out.strip() == "agent-7"


def test_mounts_and_no_host_files(warren):
    p = warren.run("--", "cat", "/proc/self/mountinfo", check=0)
    mounts = {}
    for line in p.out.splitlines():
        f = line.split()
        sep = f.index("-")
        mounts[f[4]] = (f[sep + 1], f[5])
    assert mounts["/"][0] == "overlay"
    assert mounts["/proc"][0] == "proc"
    assert mounts["/sys"][0] == "sysfs" and "ro" in mounts["/sys"][1].split(",")
    assert mounts["/dev"][0] == "tmpfs"
    assert mounts["/dev/pts"][0] == "devpts"
    assert mounts["/dev/shm"][0] == "tmpfs"
    # nothing of the host's mount table leaks in
    assert not any(m.startswith(("/work", "/mnt", "/run/warren", "/home")) for m in mounts)
    p = warren.run("--", "ls", "/work", "/root/.bashrc", "/var/lib/warren")
    assert p.returncode != 0 and "No such file" in p.err
    p = warren.run("--", "ls", "/dev", check=0)
    assert sorted(p.out.split()) == sorted(
        ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
         "tty", "urandom", "zero"])


@pytest.mark.parametrize("path", ["/proc/kcore", "/proc/kpagecgroup", "/proc/kpageflags",
                                  "/proc/kpagecount", "/proc/keys", "/proc/timer_list",
                                  "/proc/sysrq-trigger"])
def test_masked_proc_files_read_empty(warren, path):
    # masked where the host kernel has the file; absent where it has not
    p = warren.run("--", "sh", "-c", f"wc -c < {path}")
    if os.path.exists(path):
        assert (p.returncode, p.out.strip()) == (0, "0"), p.err
    else:
        assert p.returncode == 1 and "no such file" in p.err


def test_proc_writes_refused(warren):
    p = warren.probe("write", "/proc/sysrq-trigger", "1")
    assert errno_of(p.out) == ("EROFS" if os.path.exists("/proc/sysrq-trigger") else "ENOENT")
    p = warren.probe("write", "/proc/kpagecgroup", "1")
    assert errno_of(p.out) == "EROFS", p.out + p.err
    p = warren.probe("write", "/proc/sys/kernel/hostname", "8")
    assert errno_of(p.out) in ("EROFS", "EACCES"), p.out + p.err
    p = warren.run("--", "ls", "/sys/firmware", check=0)
    assert p.out.strip() == ""


def test_process_status(warren):
    p = warren.run("--", "cat", "/proc/self/status", check=0)
    assert status_field(p.out, "CapEff") == "0000000000000000"
    assert status_field(p.out, "CapPrm") == "0000000000000000"
    assert status_field(p.out, "CapBnd") == "0000000000000000"
    assert status_field(p.out, "NoNewPrivs") == "1"
    assert status_field(p.out, "Seccomp") == "2"
    p = warren.run("--cap-set", "root", "--", "cat", "/proc/self/status", check=0)
    assert int(status_field(p.out, "CapEff"), 16) != 0
    # CAP_SYS_ADMIN (21) is never granted, even with the root set
    assert not int(status_field(p.out, "CapEff"), 16) & (1 << 21)


def test_rlimits(warren):
    p = warren.run("--", "sh", "-c", "ulimit -n; ulimit -c", check=0)
    assert p.out.split() == ["1024", "0"]


def test_env_and_workdir(warren):
    p = warren.run("--env", "FOO=bar baz", "--workdir", "/tmp", "--", "sh", "-c",
                   'echo "$FOO"; pwd', check=0)
    assert p.out.splitlines() == ["bar baz", "/tmp"]


@pytest.mark.parametrize("code", [0, 1, 42, 255])
def test_exit_codes_propagate(warren, code):
    warren.run("--", "sh", "-c", f"exit {code}", check=code)


@pytest.mark.parametrize("sig,code", [("KILL", 137), ("TERM", 143), ("SEGV", 139)])
def test_signals_propagate(warren, sig, code):
    warren.run("--", "sh", "-c", f"kill -{sig} $$", check=code)


def test_signal_dispositions_are_reset(warren):
    # warren run ignores SIGPIPE itself; the command must not inherit that
    p = warren.run("--", "grep", "-E", "SigIgn|SigBlk", "/proc/self/status", check=0)
    assert "SigIgn:\t0000000000000000" in p.out and "SigBlk:\t0000000000000000" in p.out


def test_command_not_found(warren):
    p = warren.run("--", "/no/such/binary")
    assert p.returncode == 127
    assert "/no/such/binary" in p.err


def test_stdin_is_passed(warren):
    p = warren.run("--", "cat", input=b"hello from the host\n", check=0)
    assert p.out == "hello from the host\n"


def test_forkbomb_stops_at_pids_max(warren):
    t0 = time.time()
    p = warren.probe("forkbomb", opts=("--pids", "64", "--timeout", "60s"), check=0)
    assert errno_of(p.out) == "EAGAIN", p.out + p.err
    n = int(re.search(r"forks=(\d+)", p.out).group(1))
    # pids.max counts the shell-less probe itself and warren's helper
    assert 50 <= n < 64
    assert time.time() - t0 < 30


def test_memory_bomb_is_oom_killed_and_reported(warren):
    p = warren.probe("membomb", "256", opts=("--memory", "64M"))
    assert p.returncode == 137, p.out + p.err
    assert "out of memory" in p.err


def test_disk_fill_hits_quota(warren):
    p = warren.probe("diskfill", "/tmp", opts=("--disk", "16M"), check=0)
    assert errno_of(p.out) == "ENOSPC", p.out
    mib = int(re.search(r"mib=(\d+)", p.out).group(1))
    assert 13 <= mib <= 16


def test_inode_exhaustion_is_bounded(warren):
    p = warren.probe("inodefill", "/tmp", opts=("--disk", "16M"), timeout=300, check=0)
    assert errno_of(p.out) == "ENOSPC", p.out
    n = int(re.search(r"files=(\d+)", p.out).group(1))
    assert n <= 4096


def test_fd_exhaustion_is_emfile(warren):
    p = warren.probe("fdfill", check=0)
    assert errno_of(p.out) == "EMFILE", p.out
    n = int(re.search(r"opened=(\d+)", p.out).group(1))
    assert 1000 <= n <= 1024
    assert "raise_hard=errno=EPERM" in p.out


def test_output_flood_is_truncated_at_the_cap(warren):
    t0 = time.time()
    p = warren.probe("yes", opts=("--output-cap", "1M"))
    assert len(p.stdout) == 1 << 20
    assert "truncated" in p.err
    # the capped stream is closed: the writer gets EPIPE (or dies of SIGPIPE)
    assert p.returncode in (0, 141) and "errno=EPIPE" in p.err
    assert time.time() - t0 < 30


def test_one_long_line_is_truncated(warren):
    # a 10 GB line without a newline: stopped at the cap, quickly
    p = warren.probe("yes", str(10 * 1024 ** 3), opts=("--output-cap", "2M"))
    assert len(p.stdout) == 2 << 20
    assert "truncated" in p.err


def test_timeout_kills_the_whole_tree(warren):
    t0 = time.time()
    p = warren.run("--timeout", "1s", "--", "sh", "-c",
                   "setsid nohup sleep 1000 >/dev/null 2>&1 & sleep 1000")
    assert p.returncode == 124
    assert "timed out" in p.err
    assert time.time() - t0 < 20


DENIED = """ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp bpf
perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register add_key request_key
keyctl mount umount2 pivot_root chroot fsopen fsconfig fsmount fspick open_tree move_mount
mount_setattr open_tree_attr unshare setns sethostname setdomainname open_by_handle_at
name_to_handle_at init_module finit_module delete_module create_module get_kernel_syms
query_module kexec_load kexec_file_load reboot swapon swapoff syslog acct lookup_dcookie quotactl
quotactl_fd nfsservctl vhangup iopl ioperm uselib ustat sysfs _sysctl fanotify_init
lsm_set_self_attr memfd_secret personality settimeofday clock_settime clock_adjtime adjtimex mbind
set_mempolicy clone-newuser clone-newns""".split()


def test_seccomp_denied_syscalls(warren):
    script = "; ".join(f"wr-probe sys {n}" for n in DENIED + ["clone3", "fork", "getpid"])
    p = warren.run("--", "sh", "-c", script, check=0)
    results = {}
    for line in p.out.splitlines():
        f = line.split()
        results[f[0]] = f[1]
    wrong = {n: results.get(n) for n in DENIED if results.get(n) != "errno=EPERM"}
    assert not wrong, wrong
    assert results["clone3"] == "errno=ENOSYS"
    assert results["fork"] == "ok"
    assert results["getpid"] == "ok"
    # a syscall number the profile does not know
    p = warren.probe("sys", "1000", check=0)
    assert errno_of(p.out) == "ENOSYS", p.out


@pytest.mark.parametrize("name", ["FICLONE", "FICLONERANGE", "FIDEDUPERANGE", "FIBMAP",
                                  "XFS_IOC_SWAPEXT", "XFS_IOC_EXCHANGE_RANGE", "TIOCSTI",
                                  "TIOCLINUX"])
def test_denied_ioctls(warren, name):
    p = warren.probe("ioctl", name, check=0)
    assert errno_of(p.out) == "EPERM", p.out + p.err


def test_x32_syscall_is_killed(warren):
    p = warren.probe("sys", "x32-getpid")
    assert p.returncode == 128 + 31  # SIGSYS


def test_cli_errors_name_the_option(warren):
    for args, opt in [(["--memory", "lots"], "--memory"), (["--pids", "-3"], "--pids"),
                      (["--timeout", "soon"], "--timeout"), (["--cap-set", "all"], "--cap-set"),
                      (["--user", "70000"], "--user"), (["--workdir", "tmp"], "--workdir"),
                      (["--env", "=x"], "--env")]:
        p = warren.run(*args, "--", "true")
        assert p.returncode == 125, (args, p.err)
        lines = p.err.strip().splitlines()
        assert len(lines) == 1 and opt in lines[0], (args, p.err)
    p = warren.cli("run", "--", "true")
    assert p.returncode == 125 and "--image" in p.err
    p = warren.run("--", "true", image="/nonexistent/image")
    assert p.returncode == 125 and "/nonexistent/image" in p.err
    assert len(p.err.strip().splitlines()) == 1


def test_cap_set_root_allows_chown_inside_only(warren):
    script = "touch /tmp/f && chown 1000:1000 /tmp/f && stat -c %u /tmp/f"
    p = warren.run("--", "sh", "-c", script)
    assert p.returncode != 0 and "Operation not permitted" in p.err
    p = warren.run("--cap-set", "root", "--", "sh", "-c", script, check=0)
    assert p.out.strip() == "1000"
    # still no way to mount or reach the host: the mount family stays denied
    p = warren.probe("sys", "mount", opts=("--cap-set", "root"), check=0)
    assert errno_of(p.out) == "EPERM"


def test_failed_create_leaves_nothing(warren, tmp_path):
    # an image whose /proc is a file: the sandbox's own set-up fails after
    # the namespaces, cgroups and uid range exist; all must be undone
    import shutil
    bad = tmp_path / "bad-image"
    shutil.copytree(warren.images["dir"], bad, symlinks=True)
    (bad / "proc").rmdir()
    (bad / "proc").write_text("not a directory\n")
    p = warren.run("--", "true", image=str(bad))
    assert p.returncode == 125
    assert "proc" in p.err and len(p.err.strip().splitlines()) == 1
    # the fixture's teardown asserts no cgroup or uid range is left
