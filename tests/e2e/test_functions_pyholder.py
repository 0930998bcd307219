"""The Python zygote's holder (src/agent/warren-pyzygote.py, make_vclone),
without a sandbox: a prepared slot P clones the process S that runs the
call, sharing P's memory. After S's exit, P must not tear that memory down
while the host still collects the call's status and usage (on a machine
of few CPUs the teardown, milliseconds, would take the CPU the host waits
for): P waits until the host closes its end of the slot's socket, then
exits at once (and after 100 ms without the host, all the same).
"""
import importlib.util
import os
import platform
import select
import socket
import time

import pytest

from harness import ROOT

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the holder is x86-64 machine code")


def pyzygote():
    spec = importlib.util.spec_from_file_location(
        "warren_pyzygote", ROOT / "src/agent/warren-pyzygote.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def start_holder():
    """P (our child) holding S; returns (P's pid, S's pidfd, host end)."""
    vclone = pyzygote().make_vclone()
    assert vclone is not None
    host, slot = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            host.close()
            os.close(r)
            if vclone(slot.fileno()) == 0:  # S
                os.write(w, b"%d" % os.getpid())
        finally:
            os._exit(0)
    slot.close()
    os.close(w)
    spid = int(os.read(r, 32))
    os.close(r)
    sfd = os.pidfd_open(spid)
    return pid, sfd, host


def alive(pid):
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


def reap(pid):
    """Kill and reap P unless reaped already (never signal a reaped pid)."""
    try:
        if alive(pid):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def test_holder_outlives_the_call_until_the_host_lets_go():
    pid, sfd, host = start_holder()
    try:
        assert select.select([sfd], [], [], 5)[0], "S did not exit"
        time.sleep(0.03)
        assert alive(pid), "P exited with the call: its teardown races the host"
        host.close()
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    finally:
        os.close(sfd)
        host.close()
        reap(pid)


def test_holder_does_not_wait_for_a_host_that_never_lets_go():
    pid, sfd, host = start_holder()
    try:
        assert select.select([sfd], [], [], 5)[0], "S did not exit"
        t0 = time.monotonic()
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
        assert time.monotonic() - t0 < 5
    finally:
        os.close(sfd)
        host.close()
        reap(pid)


def test_failed_rehearsal_does_not_hang_the_slot(tmp_path):
    """A rehearsal step that fails after the call's fds arrived (here its
    file cannot be written: the work directory takes no files) raises at
    once: no copy of the output pipe's write end is left to keep the slot
    waiting for an EOF that never comes (the slot then serves its call
    without the rehearsal's pages)."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('z', {str(ROOT / 'src/agent/warren-pyzygote.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "m.WORKDIR = '/proc'\n"
        "try:\n"
        "    m.rehearse()\n"
        "except OSError as e:\n"
        "    print('raised', e.errno, file=sys.stderr); sys.exit(3)\n")
    import subprocess
    p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                       timeout=20, cwd=tmp_path)
    assert p.returncode == 3 and "raised" in p.stderr, (p.returncode, p.stderr)
