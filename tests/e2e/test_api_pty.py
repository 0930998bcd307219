"""Interactive commands: GET /v1/sandboxes/{id}/pty upgraded to warren-pty/1
(handshake, framed relay, resize, eof, errors before the upgrade, malformed
frames and client disconnects killing the command's tree). On the
container and microvm tiers (vmtiers.py: one VM for the module); the vm
tier has no terminal (qemu-guest-agent offers none): 501."""
import json
import socket
import struct
import time
import urllib.parse

import pytest

from vmtiers import tier_fixtures

api, sandbox, tier = tier_fixtures(["container", "microvm"])


@pytest.fixture
def daemon(tier):
    return tier.d

DATA, RESIZE, EOF, EXIT = 0, 1, 2, 3


def frame(kind, payload=b""):
    return struct.pack(">BI", kind, len(payload)) + payload


class Pty:
    """One raw connection: the HTTP upgrade, then frames."""

    def __init__(self, daemon, sid, query="", tenant=None, headers=None, first=b""):
        if tenant:
            self.sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=30)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(30)
            self.sock.connect(str(daemon.sock))
        hdrs = {"Host": "localhost", "Connection": "Upgrade", "Upgrade": "warren-pty/1"}
        if tenant:
            hdrs["Authorization"] = f"Bearer {daemon.tokens[tenant]}"
        hdrs.update(headers or {})
        req = f"GET /v1/sandboxes/{sid}/pty{query} HTTP/1.1\r\n"
        req += "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if v is not None)
        self.sock.sendall(req.encode() + b"\r\n" + first)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed during the handshake: {self.buf!r}"
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip()
                        for k, v in (x.split(":", 1) for x in lines[1:])}
        self.body = None
        if self.status != 101:
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
            self.body = json.loads(self.buf[:n])

    def send(self, kind, payload=b""):
        self.sock.sendall(frame(kind, payload))

    def type(self, text):
        self.send(DATA, text.encode())

    def resize(self, rows, cols):
        self.send(RESIZE, struct.pack(">HH", rows, cols))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read_frame(self):
        """(type, payload), or None when the daemon closed the connection."""
        if not self._need(5):
            assert self.buf == b"", f"partial frame header {self.buf!r}"
            return None
        kind, n = struct.unpack(">BI", self.buf[:5])
        assert self._need(5 + n), "connection closed inside a frame"
        payload, self.buf = self.buf[5:5 + n], self.buf[5 + n:]
        return kind, payload

    def until_exit(self):
        """All output up to the exit frame: (text, exit object)."""
        out = b""
        while True:
            f = self.read_frame()
            assert f is not None, f"closed without an exit frame; output {out!r}"
            if f[0] == EXIT:
                return out.decode(errors="replace"), json.loads(f[1])
            assert f[0] == DATA, f
            out += f[1]

    def until_output(self, needle, timeout=20):
        out = b""
        deadline = time.time() + timeout
        while needle.encode() not in out:
            assert time.time() < deadline, f"no {needle!r} in {out!r}"
            f = self.read_frame()
            assert f is not None and f[0] == DATA, (f, out)
            out += f[1]
        return out.decode(errors="replace")

    def closed(self, timeout=10):
        """True when the daemon closes the connection (frames before it are
        skipped) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                f = self.read_frame()
                if f is None:
                    return True
                if f[0] == EXIT:
                    return False
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def lines(text):
    return [x.strip() for x in text.replace("\r", "").split("\n")]


def test_shell_session_with_size_and_exit_code(daemon, sandbox):
    p = Pty(daemon, sandbox, "?rows=33&cols=111")
    assert p.status == 101
    assert p.headers["upgrade"] == "warren-pty/1"
    p.type("echo hi; stty size; exit 3\n")
    out, ex = p.until_exit()
    assert "hi" in lines(out), out
    assert "33 111" in lines(out), out
    assert ex["exit_code"] == 3 and ex["reason"] == "exited" and ex["signal"] == 0, ex
    assert p.read_frame() is None  # closed after the exit frame
    p.close()


def test_first_frame_sent_with_the_request(daemon, sandbox):
    # bytes the client sends before the 101 arrives are not lost
    p = Pty(daemon, sandbox, "?cmd=sh&cmd=-c&cmd=read%20x%3B%20echo%20got%3D%24x%3B%20tty",
            first=frame(DATA, b"early\n"))
    assert p.status == 101
    out, ex = p.until_exit()
    assert "got=early" in lines(out) and "/dev/pts/0" in lines(out), out
    assert ex["exit_code"] == 0
    p.close()


def test_resize_changes_the_terminal(daemon, sandbox):
    p = Pty(daemon, sandbox)
    p.type("stty size\n")
    p.until_output("24 80")
    p.resize(50, 132)
    p.type("stty size; exit\n")
    out, ex = p.until_exit()
    assert "50 132" in lines(out), out
    assert ex["exit_code"] == 0
    p.close()


def test_eof_ends_input(daemon, sandbox):
    p = Pty(daemon, sandbox, "?cmd=wc&cmd=-l&user=1000&cwd=/tmp&env=A%3Db")
    p.type("one\ntwo\n")
    p.send(EOF)
    out, ex = p.until_exit()
    assert "2" in lines(out), out
    assert ex["exit_code"] == 0
    p.close()
    p = Pty(daemon, sandbox, "?cmd=sh&cmd=-c&cmd=id%20-u%3B%20pwd%3B%20echo%20$A&user=1000&cwd=/tmp"
            "&env=A%3Db%3Dc")
    out, ex = p.until_exit()
    assert lines(out)[:3] == ["1000", "/tmp", "b=c"], out
    p.close()


def test_start_failure_is_reported(daemon, sandbox):
    p = Pty(daemon, sandbox, "?cmd=/no/such/binary")
    assert p.status == 101
    out, ex = p.until_exit()
    assert ex["reason"] == "start_failed" and ex["exit_code"] == 127, ex
    assert "/no/such/binary" in out
    p.close()


def test_other_tenant_gets_404_without_upgrade(daemon, alice, tier):
    if tier.vm:
        pytest.skip("tenancy is the same code on every tier (the container run covers it)")
    sid = alice.create()
    try:
        p = Pty(daemon, sid, tenant="bob")
        assert p.status == 404 and p.body["error"]["code"] == "not_found"
        p.close()
        p = Pty(daemon, "nosuchsandbox")
        assert p.status == 404 and p.body["error"]["code"] == "not_found"
        p.close()
        p = Pty(daemon, sid, "?cmd=true", tenant="alice")
        assert p.status == 101
        assert p.until_exit()[1]["exit_code"] == 0
        p.close()
    finally:
        alice.kill(sid)


def test_request_errors_before_the_upgrade(daemon, api, sandbox):
    p = Pty(daemon, sandbox, headers={"Upgrade": None, "Connection": None})
    assert p.status == 426 and p.body["error"]["code"] == "upgrade_required"
    assert p.body["error"]["field"] == "Upgrade"
    assert p.headers["upgrade"] == "warren-pty/1"
    p.close()
    p = Pty(daemon, sandbox, headers={"Upgrade": "websocket"})
    assert p.status == 426, p.body
    p.close()
    p = Pty(daemon, sandbox, headers={"Connection": "keep-alive"})
    assert p.status == 400 and p.body["error"]["field"] == "Connection"
    p.close()
    for q, field in (("?rows=0", "rows"), ("?cols=70000", "cols"), ("?user=x", "user"),
                     ("?env=novalue", "env"), ("?bogus=1", "bogus"), ("?cmd=", "cmd")):
        p = Pty(daemon, sandbox, q)
        assert p.status == 400, (q, p.body)
        assert p.body["error"] == {**p.body["error"], "code": "invalid_argument", "field": field}
        p.close()
    # a plain request without the headers gets the JSON error too
    r = api.get(f"/v1/sandboxes/{sandbox}/pty")
    assert r.status == 426 and r.error == ("upgrade_required", "Upgrade")
    r = api.post(f"/v1/sandboxes/{sandbox}/pty", {})
    assert r.status == 405


def pty_commands(api, sid):
    return [c for c in api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]]


def test_malformed_frames_close_and_kill(daemon, api, sandbox):
    for bad in (frame(9, b"x"), struct.pack(">BI", DATA, 2 << 20), frame(RESIZE, b"\0\1"),
                frame(EOF, b"x")):
        p = Pty(daemon, sandbox, "?cmd=sleep&cmd=1000")
        assert p.status == 101
        p.sock.sendall(bad)
        assert p.closed(), bad
        p.close()
        cmds = pty_commands(api, sandbox)
        assert cmds[-1]["cmd"] == ["sleep", "1000"]
        deadline = time.time() + 10
        while pty_commands(api, sandbox)[-1]["state"] != "finished":
            assert time.time() < deadline
            time.sleep(0.05)
        assert pty_commands(api, sandbox)[-1]["reason"] == "killed"
    out = api.run(sandbox, "echo still works; pidof sleep || echo none")
    assert out["stdout"] == "still works\nnone\n", out


def test_client_disconnect_kills_the_tree(daemon, api, sandbox):
    p = Pty(daemon, sandbox, "?cmd=sh&cmd=-c&cmd=sleep%201000%20%26%20sleep%201001")
    assert p.status == 101
    deadline = time.time() + 10
    while api.run(sandbox, "pidof sleep | wc -w")["stdout"].strip() != "2":
        assert time.time() < deadline, "the sleeps never started"
        time.sleep(0.05)
    p.close()
    deadline = time.time() + 10
    while True:
        out = api.run(sandbox, "pidof sleep || echo gone")["stdout"].strip()
        if out == "gone":
            break
        assert time.time() < deadline, f"still running after the client left: {out}"
        time.sleep(0.1)
    # and a shell typed into, then abandoned
    p = Pty(daemon, sandbox)
    p.type("sleep 1002\n")
    deadline = time.time() + 10
    while api.run(sandbox, "pidof sleep || true")["stdout"].strip() == "":
        assert time.time() < deadline
        time.sleep(0.05)
    p.sock.shutdown(socket.SHUT_RDWR)
    p.close()
    deadline = time.time() + 10
    while api.run(sandbox, "pidof sleep || echo gone")["stdout"].strip() != "gone":
        assert time.time() < deadline
        time.sleep(0.1)


def test_large_output_and_input(daemon, sandbox):
    # more than the relay's buffers each way, and a data frame of 1 MiB
    script = ("stty raw -echo; echo ready; head -c 1048576 | wc -c; "
              "head -c 300000 /dev/zero | tr '\\0' q")
    p = Pty(daemon, sandbox, "?cmd=sh&cmd=-c&cmd=" + urllib.parse.quote(script, safe=""))
    p.until_output("ready")  # raw mode first: a canonical line holds 4 KiB
    p.send(DATA, b"z" * (1 << 20))
    out, ex = p.until_exit()
    assert ex["exit_code"] == 0, ex
    assert "1048576" in out and out.count("q") == 300000, (len(out), out[:200])
    p.close()
