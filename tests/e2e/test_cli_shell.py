"""warren shell: piped input (no raw mode, ^D at the end), and a real local
terminal (Python's pty module): raw mode with the remote echo, ^C going to
the remote command, window size and SIGWINCH, exit status, and the local
terminal restored on the way out, signals included."""
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import BUILD
from test_cli_client import Cli


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


@pytest.fixture
def sb(cli):
    sid = cli("create", "--image", "busybox", "--timeout", "5m", check=0).out.strip()
    yield sid
    cli("rm", "-f", sid)


def test_piped_input(cli, sb):
    p = cli("shell", sb, input=b"echo hello; exit 5\n", timeout=60)
    assert p.returncode == 5, (p.out, p.err)
    assert "hello" in p.out.replace("\r", "").split("\n"), p.out
    # the end of the input is ^D: a command reading lines sees its end
    p = cli("shell", sb, "wc", "-l", input=b"a\nb\nc\n", timeout=60)
    assert p.returncode == 0, (p.out, p.err)
    assert "3" in p.out.replace("\r", "").split("\n"), p.out


def test_piped_script_without_exit(cli, sb):
    """A script piped into the shell needs no `exit`: at the end of the
    input the shell gets ^D once it has read everything, and exits with
    the status of its last command."""
    p = cli("shell", sb, input=b"echo hi\n", timeout=60)
    assert p.returncode == 0, (p.out, p.err)
    assert "hi" in p.out.replace("\r", "").split("\n"), p.out
    script = b"echo one\nsleep 0.5\necho two\nfalse\n"
    p = cli("shell", sb, input=script, timeout=60)
    out = p.out.replace("\r", "").split("\n")
    assert p.returncode == 1 and "one" in out and "two" in out, (p.out, p.err)
    # no stray byte reaches the shell: nothing is reported as not found
    assert "not found" not in p.out, p.out


def test_command_and_options(cli, sb):
    p = cli("shell", "-u", "1000", "-w", "/tmp", "-e", "K=V", sb, "--",
            "sh", "-c", "id -u; pwd; echo $K; echo $TERM; exit 7", input=b"",
            env=dict(cli.env, TERM="vt100"), timeout=60)
    assert p.returncode == 7, (p.out, p.err)
    assert p.out.replace("\r", "").split("\n")[:4] == ["1000", "/tmp", "V", "vt100"], p.out
    p = cli("shell", sb, "sh", "-c", "kill -9 $$", input=b"")
    assert p.returncode == 137, (p.out, p.err)


def test_errors(cli, sb):
    p = cli("shell", "nosuchsandbox", input=b"")
    assert p.returncode == 125 and "not found" in p.err, p.err
    p = cli("shell")
    assert p.returncode == 125 and "no sandbox" in p.err
    # refused before the upgrade: the JSON error of the answer is the message
    p = cli("shell", "-w", "", sb, input=b"")
    assert p.returncode == 125 and "cwd: must be 1 to 4095 bytes" in p.err, p.err
    p = cli("shell", sb, "/no/such/binary", input=b"")
    assert p.returncode == 127, (p.out, p.err)
    assert "/no/such/binary" in p.out


class Term:
    """warren shell on a local pseudo-terminal of our own."""

    def __init__(self, cli, *args, rows=40, cols=120):
        self.master, self.slave = os.openpty()
        self.resize(rows, cols)
        self.before = termios.tcgetattr(self.slave)
        self.proc = subprocess.Popen([cli.exe, *args], stdin=self.slave, stdout=self.slave,
                                     stderr=self.slave, env=dict(cli.env, TERM="xterm"),
                                     start_new_session=True)
        self.out = b""

    def resize(self, rows, cols):
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text):
        os.write(self.master, text.encode())

    def read_until(self, needle, timeout=20):
        deadline = time.time() + timeout
        while needle.encode() not in self.out:
            left = deadline - time.time()
            assert left > 0, f"no {needle!r} in {self.out!r}"
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                self.out += os.read(self.master, 65536)
        return self.out.decode(errors="replace")

    def wait(self, timeout=20):
        rc = self.proc.wait(timeout=timeout)
        while select.select([self.master], [], [], 0.2)[0]:
            self.out += os.read(self.master, 65536)
        return rc

    def restored(self):
        return termios.tcgetattr(self.slave) == self.before

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def test_terminal_raw_mode_resize_and_status(cli, sb, api):
    t = Term(cli, "shell", sb)
    try:
        t.type("stty size\r")
        t.read_until("40 120")
        # raw mode: the local terminal neither buffers lines nor echoes
        attrs = termios.tcgetattr(t.slave)
        assert not attrs[3] & (termios.ICANON | termios.ECHO)
        # with the remote echo off, what is typed shows up only where the
        # remote command prints it (a local echo would show it twice)
        t.type("stty -echo; echo re''ady; read x; echo got:$x; stty echo\r")
        t.read_until("ready\r\n")
        t.out = b""
        t.type("s3cret\r")
        out = t.read_until("got:s3cret")
        time.sleep(0.3)
        out = t.read_until("got:s3cret")
        assert out.count("s3cret") == 1, out
        # ^C reaches the remote foreground command, not warren
        t.type("sleep 100\r")
        deadline = time.time() + 20
        while api.run(sb, "pidof sleep || true")["stdout"].strip() == "":
            assert time.time() < deadline
            time.sleep(0.05)
        t.type("\x03")
        t.type("echo after$((1+1))\r")
        t.read_until("after2")
        assert t.proc.poll() is None
        # the window changes: SIGWINCH makes warren send the new size
        t.resize(33, 91)
        t.proc.send_signal(signal.SIGWINCH)
        time.sleep(0.3)
        t.out = b""
        t.type("stty size\r")
        t.read_until("33 91")
        t.type("exit 9\r")
        assert t.wait() == 9
        assert t.restored()
    finally:
        t.close()


def test_terminal_restored_on_signal_and_remote_killed(cli, sb, api):
    t = Term(cli, "shell", sb, "sleep", "1234")
    try:
        deadline = time.time() + 20
        while "1234" not in api.run(sb, "ps -o args")["stdout"]:
            assert time.time() < deadline
            time.sleep(0.1)
        assert not t.restored()  # raw mode while it runs
        t.proc.send_signal(signal.SIGTERM)
        assert t.wait() == -signal.SIGTERM
        assert t.restored()
        deadline = time.time() + 20
        while "1234" in api.run(sb, "ps -o args")["stdout"]:
            assert time.time() < deadline, "the remote command outlived the client"
            time.sleep(0.1)
    finally:
        t.close()


def test_over_tcp_with_a_token(cli, warrend, alice):
    sid = alice.create()
    try:
        url = f"http://127.0.0.1:{warrend.port}"
        p = cli("shell", "--url", url, "--token", warrend.tokens["alice"], sid,
                "sh", "-c", "echo tcp; exit 3", input=b"")
        assert p.returncode == 3 and "tcp" in p.out, (p.out, p.err)
        # another tenant's sandbox: the API's 404 comes back as the error
        p = cli("shell", "--url", url, "--token", warrend.tokens["bob"], sid, input=b"")
        assert p.returncode == 125 and "not found" in p.err, p.err
    finally:
        alice.kill(sid)
