"""CRIU for container checkpoints (pause with keep_memory=false): warrend
finds its criu by configuration, runs `criu check` once at start, says in
/v1/health whether checkpointing is available, and refuses keep_memory=false
on a container with the reason when it is not (where it is:
test_lifecycle_suspend_container.py); warren's CRIU patches, each tested on
trees of its own."""
import ctypes
import os
import signal
import subprocess

import pytest

from harness import BUILD, Daemon

libc = ctypes.CDLL(None, use_errno=True)


def criu_check(path):
    try:
        return subprocess.run([path, "check"], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


def built_criu():
    """The build's warren-criu, or the test is skipped."""
    criu = BUILD / "warren-criu"
    if not criu.exists() or not criu_check(str(criu)):
        pytest.skip("no working warren-criu in the build")
    return criu


def run_criu(criu, action, img, *args, pass_fds=()):
    """criu ACTION with images in img, verbose log img/ACTION.log, which it
    returns; a failure shows the log's end. CRIU's hardware breakpoints
    never fire on some paravirtualised hosts (this one): its
    no-breakpoint mode (CRIU_FAULT=130), as warrend would run it."""
    log = img / f"{action}.log"
    r = subprocess.run([str(criu), action, "-D", str(img), "-o", log.name, "-v4", *args],
                       capture_output=True, text=True, timeout=120, pass_fds=pass_fds,
                       env=dict(os.environ, CRIU_FAULT="130"))
    text = log.read_text(errors="replace") if log.exists() else ""
    assert r.returncode == 0, text[-3000:] or r.stderr
    return text


def test_health_reports_the_configured_criu(api):
    ck = api.get("/v1/health").json()["checkpoint"]
    # the default: the build's own warren-criu (scripts/criu-build.sh) when
    # it was built, else an installed one, else Debian's
    built = BUILD / "warren-criu"
    if built.exists():
        assert ck["criu"] == str(built), ck
    assert ck["criu"].startswith("/"), ck
    # the daemon's verdict is criu check's own
    assert ck["available"] == criu_check(ck["criu"]), ck
    assert ("reason" in ck) == (not ck["available"]), ck
    # a container's keep_memory=false checkpoints it where CRIU works,
    # and is refused saying why where it does not
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    if ck["available"]:
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert api.post(f"/v1/sandboxes/{sid}/resume").json()["state"] == "running"
    else:
        assert r.status == 400 and r.error == ("invalid_argument", "keep_memory"), r
        assert ck["reason"] in r.json()["error"]["message"], r
        assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
    assert api.kill(sid).status == 204


def test_unusable_criu_is_reported_and_refused(fresh_daemon, tmp_path):
    bad = tmp_path / "no-such-criu"
    d = fresh_daemon(extra={"criu": str(bad)}).start()
    c = d.client()
    try:
        ck = c.get("/v1/health").json()["checkpoint"]
        assert ck["available"] is False and ck["criu"] == str(bad), ck
        assert str(bad) in ck["reason"] and "No such file" in ck["reason"], ck
        sid = c.create()
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 400 and r.error == ("invalid_argument", "keep_memory"), r
        msg = r.json()["error"]["message"]
        assert "CRIU" in msg and str(bad) in msg, msg
        # nothing changed: still running, and an in-memory pause works
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert c.post(f"/v1/sandboxes/{sid}/pause").status == 200
        assert c.kill(sid).status == 204
    finally:
        c.close()


def fake_criu_checkpoint(fresh_daemon, tmp_path, script):
    """/v1/health's checkpoint of a daemon whose criu is the shell script."""
    fake = tmp_path / "criu"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    d = fresh_daemon(extra={"criu": str(fake)}).start()
    c = d.client()
    try:
        return c.get("/v1/health").json()["checkpoint"]
    finally:
        c.close()


def test_failing_criu_check_is_reported(fresh_daemon, tmp_path):
    ck = fake_criu_checkpoint(fresh_daemon, tmp_path,
                              "echo 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area "
                              "bounds' >&2\nexit 1\n")
    assert ck["available"] is False, ck
    assert "criu check" in ck["reason"] and "vDSO area bounds" in ck["reason"], ck


def test_criu_without_warrens_patches_is_refused(fresh_daemon, tmp_path):
    """A criu that passes `criu check` but lacks the options warren's patches
    add (Debian's own, on a kernel it starts on) would fail every restore:
    checkpoints are off, saying which option is missing."""
    ck = fake_criu_checkpoint(fresh_daemon, tmp_path, "echo 'Looks good.'\nexit 0\n")
    assert ck["available"] is False, ck
    assert "--landlock-ruleset-fd" in ck["reason"] and "patches" in ck["reason"], ck


def test_bad_criu_config_is_refused(tmp_path):
    d = Daemon(BUILD, tmp_path / "d", "badcriu", extra={"criu": 5})  # never started
    p = subprocess.run([str(d.build / "warrend"), "--config", str(d.config)],
                       capture_output=True, text=True, timeout=60, env=d.env)
    assert p.returncode != 0 and "criu" in p.stderr, p.stderr


# A process tree confined as container commands are: a process entered a
# Landlock domain (after no_new_privs) scoping abstract unix sockets and
# signals, then forked a child, which shares the domain. It counts in memory
# (a REPL's state in miniature) and, on every count, probes with signal 0
# whom it may signal: its child (same domain: allowed), the process above
# its domain and an outsider (scoped: EPERM); the child probes it back
# (allowed: one domain, not a nested one). Mode "root": the confined
# process is the dumped tree's root. Mode "children": the root is an
# unconfined init-like parent (as a container's warren-init is), which
# probes the outsider and the confined child too (allowed: it is outside).
TREE = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mode, out, outsider = sys.argv[1], sys.argv[2], int(sys.argv[3])

def confine():
    assert libc.prctl(38, 1, 0, 0, 0) == 0                  # PR_SET_NO_NEW_PRIVS
    attr = (ctypes.c_uint64 * 3)(0, 0, 3)                    # scoped: abstract unix, signal
    fd = libc.syscall(444, attr, ctypes.sizeof(attr), 0)     # landlock_create_ruleset
    assert fd >= 0, ctypes.get_errno()
    assert libc.syscall(446, fd, 0) == 0, ctypes.get_errno()  # landlock_restrict_self
    os.close(fd)

def probe(pid):
    try:
        os.kill(pid, 0)
        return "ok"
    except PermissionError:
        return "EPERM"
    except ProcessLookupError:
        return "ESRCH"

def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)

def child_forever():
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # probes its parent: same domain, allowed
        while True:
            write(out + ".child", " ".join(["1", "parent=" + probe(parent),
                                           "outsider=" + probe(outsider)]))
            time.sleep(0.05)
    return pid

def count(probes):
    n = 0
    while True:
        n += 1
        write(out, " ".join([str(n)] + [k + "=" + probe(v) for k, v in probes.items()]))
        time.sleep(0.02)

if mode == "root":
    confine()
    count({"child": child_forever(), "outsider": outsider})
top = os.getpid()
confined = os.fork()
if confined == 0:
    confine()
    count({"child": child_forever(), "parent": top, "outsider": outsider})
n = 0
while True:  # the unconfined root
    n += 1
    write(out + ".root", " ".join([str(n), "outsider=" + probe(outsider),
                                   "confined=" + probe(confined)]))
    time.sleep(0.02)
"""


def read_state(path, above=0, timeout=20):
    """The tree's latest line: (count, {probe: result})."""
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            n, *probes = path.read_text().split()
            if int(n) > above:
                return int(n), dict(p.split("=") for p in probes)
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"{path}: no count above {above}")


@pytest.mark.parametrize("mode", ["root", "children"])
def test_warren_criu_restores_a_landlock_scoped_tree(tmp_path, mode):
    """The build's CRIU (scripts/criu-patches) dumps a process tree whose
    Landlock domain scopes abstract unix sockets: its parasite gets its
    transport from a socket pair (pidfd_getfd), not from a connect the
    scope refuses (0001). The restore goes on from the dumped state, and
    with --landlock-ruleset-fd the tree is confined again as it was (0002):
    one domain entered by the task that first entered it, before it forks,
    so the confined process may still signal its own child but not the
    process above it nor an outsider, and an unconfined root stays
    unconfined (--landlock-root-children, a container's init)."""
    criu = built_criu()
    img = tmp_path / "img"
    img.mkdir()
    out = tmp_path / "state"
    root_out = tmp_path / "state.root"
    child_out = tmp_path / "state.child"
    child_probes = {"parent": "ok", "outsider": "EPERM"}
    outsider = subprocess.Popen(["sleep", "1000"])
    p = subprocess.Popen(["/usr/bin/python3", "-c", TREE, mode, str(out), str(outsider.pid)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    confined_probes = {"child": "ok", "outsider": "EPERM"}
    if mode == "children":
        confined_probes["parent"] = "EPERM"
    root_probes = {"outsider": "ok", "confined": "ok"}
    restored = None
    ruleset = -1
    try:
        before, probes = read_state(out, 5)
        assert probes == confined_probes, probes  # as confined before the dump
        assert read_state(child_out)[1] == child_probes
        if mode == "children":
            assert read_state(root_out, 5)[1] == root_probes
        log = run_criu(criu, "dump", img, "-t", str(p.pid), "--leave-running")
        assert "transport socket" not in log
        after_dump = read_state(out)[0]  # the dumped count is in [before, after_dump]
        dumped = tree_pids(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        gone(dumped)  # CRIU restores the same pids: wait until they are free
        for f in (out, root_out, child_out):
            if f.exists():
                f.unlink()
        # The ruleset the tree's domain was made from (warrend passes the
        # sandbox's own), inherited by criu.
        attr = (ctypes.c_uint64 * 3)(0, 0, 3)
        ruleset = libc.syscall(444, attr, ctypes.sizeof(attr), 0)
        assert ruleset >= 0, ctypes.get_errno()
        args = ["-d", "--pidfile", str(tmp_path / "pid"), "--landlock-ruleset-fd", str(ruleset)]
        if mode == "children":
            args.append("--landlock-root-children")
        run_criu(criu, "restore", img, *args, pass_fds=(ruleset,))
        restored = int((tmp_path / "pid").read_text())
        # it goes on counting from where the dump found it, not from 1
        first, probes = read_state(out)
        # (the bound: a second of counts, for a loaded machine; from 1 it
        # would be below before)
        assert before < first <= after_dump + 50, (before, first, after_dump)
        nxt, probes = read_state(out, first)
        assert nxt > first
        # confined again, in one domain with its child (not two nested ones)
        assert probes == confined_probes, probes
        assert read_state(child_out)[1] == child_probes
        if mode == "children":
            assert read_state(root_out)[1] == root_probes  # the root is not
        # the ruleset fd is not left in any restored task
        for pid in tree_pids(restored):
            status = open(f"/proc/{pid}/status").read()
            if mode == "root" or pid != restored:
                assert "NoNewPrivs:\t1" in status, status
            for fd in os.listdir(f"/proc/{pid}/fd"):
                assert os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:landlock-ruleset"
    finally:
        if ruleset >= 0:
            os.close(ruleset)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if restored:
            for pid in reversed(tree_pids(restored)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        outsider.kill()
        outsider.wait()


def gone(pids, timeout=20):
    import time
    end = time.monotonic() + timeout
    while any(os.path.exists(f"/proc/{pid}") for pid in pids):
        assert time.monotonic() < end, pids
        time.sleep(0.02)


def tree_pids(root):
    """root and its descendants, parents first."""
    pids, i = [root], 0
    while i < len(pids):
        try:
            with open(f"/proc/{pids[i]}/task/{pids[i]}/children") as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        i += 1
    return pids


# A server in miniature: a TCP listener on loopback that answers each
# connection with how many it has served (state in memory).
SERVER = r"""
import socket, sys
s = socket.socket()
# as servers do: the closed connections' TIME_WAIT must not keep the port
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(8)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a UDP socket held too
u.bind(("127.0.0.1", 0))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
n = 0
while True:
    c, _ = s.accept()
    n += 1
    c.sendall(b"%d\n" % n)
    c.close()
"""


def ask(port):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        return int(c.makefile().readline())


def test_warren_criu_dumps_and_restores_inet_sockets(tmp_path):
    """Linux 6.16 made SO_PASSCRED and SO_PASSSEC unix/netlink-only: CRIU
    4.1.1 asks every socket for them and fails the dump of any process
    with a TCP or UDP socket ("Can't get 1:16 opt"). The build's CRIU
    (0003) records them only where they apply: a listener is dumped,
    killed, restored on its port, and goes on counting its connections."""
    import time
    criu = built_criu()
    img = tmp_path / "img"
    img.mkdir()
    portf = tmp_path / "port"
    p = subprocess.Popen(["/usr/bin/python3", "-c", SERVER, str(portf)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    restored = None
    try:
        end = time.monotonic() + 20
        while not portf.exists():
            assert time.monotonic() < end and p.poll() is None
            time.sleep(0.02)
        port = int(portf.read_text())
        assert [ask(port), ask(port)] == [1, 2]
        run_criu(criu, "dump", img, "-t", str(p.pid))
        p.wait(timeout=10)  # the dump ended it (no --leave-running)
        run_criu(criu, "restore", img, "-d", "--pidfile", str(tmp_path / "pid"))
        restored = int((tmp_path / "pid").read_text())
        assert [ask(port), ask(port)] == [3, 4]  # its count, on its port
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if restored:
            try:
                os.kill(restored, signal.SIGKILL)
            except ProcessLookupError:
                pass


def sandbox_init_pid(sid):
    """Host pid of a sandbox's PID 1 (warren-init in the sandbox's cgroup)."""
    import os
    import re
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{p}/cgroup") as f:
                cg = f.read()
        except OSError:
            continue
        if comm == "warren-init" and re.search(rf"/{sid}(/|$)", cg, re.M):
            return int(p)
    raise AssertionError(f"no PID 1 found for {sid}")


def fdinfo_ext(path):
    """CRIU's external-file key of an open file: file[mnt_id:inode] (hex)."""
    import os
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fd_ext(os.getpid(), fd)
    finally:
        os.close(fd)


def fd_ext(pid, fd):
    import os
    info = dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/fdinfo/{fd}").read().splitlines()
                if ":" in ln)
    ino = os.stat(f"/proc/{pid}/fd/{fd}").st_ino
    return "file[%x:%x]" % (int(info["mnt_id"]), ino)


def test_warren_criu_dumps_a_live_sandbox_with_its_commands(api, tmp_path):
    """A container sandbox made by warrend, with an API background command
    and an orphan of a finished command running, is one process tree CRIU
    can dump from PID 1: commands are PID 1's children (not warrend's), in
    PID 1's cgroup namespace (not nested ones), and PID 1 and each command
    lead sessions of their own inside the PID namespace. The masked-path
    mounts (bind mounts of a detached tmpfs, which CRIU cannot dump yet;
    API-LIFECYCLE.md) and the few host files PID 1 holds are passed over
    here with --skip-mnt and --external: this checks the process tree, not
    the mounts."""
    import re
    criu = built_criu()
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["sleep", "1000"], "background": True})
    assert r.status == 201, r
    bg = r.json()["pid"]
    out = api.run(sid, ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & "
                        "while [ $(pidof sleep | wc -w) -lt 2 ]; do sleep 0.05; done; "
                        "pidof sleep"])
    sleeps = {int(p) for p in out["stdout"].split()}
    assert bg in sleeps and len(sleeps) == 2, out
    init = sandbox_init_pid(sid)
    args = []
    for ln in open(f"/proc/{init}/mountinfo").read().splitlines():
        mnt = ln.split()[4]
        if mnt == "/dev" or mnt.startswith(("/dev/", "/proc/", "/sys/")):
            args += ["--skip-mnt", mnt]
    args += ["--external", fdinfo_ext(BUILD / "warren-init")]
    for fd in os.listdir(f"/proc/{init}/fd"):
        if int(fd) > 2:
            args += ["--external", fd_ext(init, fd)]
    img = tmp_path / "img"
    img.mkdir()
    log = run_criu(criu, "dump", img, "-t", str(init), "--leave-running", *args)
    # every process was dumped, each in a session led inside the sandbox
    dumped = {int(p): int(s) for s, p in re.findall(r"sid=(\d+) pgid=\d+ pid=(\d+)", log)}
    assert set(dumped) == {1} | sleeps, dumped
    assert dumped[1] == 1 and dumped[bg] == bg, dumped
    # left running: the sandbox and both commands go on
    out = api.run(sid, ["pidof", "sleep"])
    assert {int(p) for p in out["stdout"].split()} == sleeps, out
    assert api.kill(sid).status == 204
