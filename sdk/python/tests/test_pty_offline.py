"""sb.pty without a daemon: a tiny Unix-socket server in a thread plays the
daemon's side of warren-pty/1 (the request line and headers, the 101, the
frames, an error answer instead of the 101), for the sync and async
clients."""
import asyncio
import json
import os
import socket
import struct
import tempfile
import threading

import pytest

import warren
from warren import AsyncSandbox, Sandbox
from warren.pty import _data_frames, _resize_frame


def frame(kind, payload=b""):
    return struct.pack(">BI", kind, len(payload)) + payload


class FakeDaemon:
    """Accepts one connection and runs `script(conn, head)` on it."""

    def __init__(self, script):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "w.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(1)
        self.script = script
        self.head = None
        self.error = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            conn, _ = self.srv.accept()
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(4096)
            self.head, rest = buf.split(b"\r\n\r\n", 1)
            self.script(conn, rest)
            conn.close()
        except Exception as e:  # reported by the test
            self.error = e

    def close(self):
        self.t.join(10)
        self.srv.close()
        os.unlink(self.path)
        os.rmdir(self.dir)
        assert self.error is None, self.error


def read_frames(conn, rest, n):
    buf, out = rest, []
    while len(out) < n:
        while len(buf) < 5 or len(buf) < 5 + struct.unpack(">I", buf[1:5])[0]:
            chunk = conn.recv(65536)
            if not chunk:
                return out, buf
            buf += chunk
        k, ln = struct.unpack(">BI", buf[:5])
        out.append((k, buf[5:5 + ln]))
        buf = buf[5 + ln:]
    return out, buf


SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: warren-pty/1\r\nConnection: Upgrade\r\n\r\n"
EXIT = json.dumps({"id": "c4", "exit_code": 3, "signal": 0, "reason": "exited"}).encode()


def test_frames():
    assert _resize_frame(cols=132, rows=50) == frame(1, struct.pack(">HH", 50, 132))
    assert b"".join(_data_frames("hé")) == frame(0, "hé".encode())
    big = _data_frames(b"x" * ((1 << 20) + 5))
    assert [len(f) for f in big] == [5 + (1 << 20), 5 + 5]
    with pytest.raises(ValueError):
        _resize_frame(cols=0, rows=10)


def test_sync_session_request_frames_and_exit():
    seen = {}

    def script(conn, rest):
        conn.sendall(SWITCH + frame(0, b"hello "))
        got, rest = read_frames(conn, rest, 3)
        seen["frames"] = got
        conn.sendall(frame(0, b"world") + frame(3, EXIT))

    d = FakeDaemon(script)
    sb = Sandbox("0123456789abcdef", socket=d.path, api_key="tok")
    out = []
    h = sb.pty.create(cols=100, rows=30, on_data=out.append, cwd="/tmp", envs={"A": "b=c"},
                      cmd=["sh", "-c", "echo $A"])
    h.send_stdin("ls\n")
    h.resize(cols=120, rows=40)
    h.send_eof()
    r = h.wait(timeout=10)
    d.close()
    head = d.head.decode()
    line = head.split("\r\n")[0]
    assert line.startswith("GET /v1/sandboxes/0123456789abcdef/pty?") and line.endswith(" HTTP/1.1")
    q = line.split("?", 1)[1].split(" ")[0]
    assert q == ("cmd=sh&cmd=-c&cmd=echo+%24A&rows=30&cols=100&cwd=%2Ftmp&env=A%3Db%3Dc"), q
    hdrs = {k.lower(): v for k, v in (x.split(": ", 1) for x in head.split("\r\n")[1:])}
    assert hdrs["upgrade"] == "warren-pty/1" and hdrs["connection"] == "Upgrade"
    assert hdrs["authorization"] == "Bearer tok"
    assert seen["frames"] == [(0, b"ls\n"), (1, struct.pack(">HH", 40, 120)), (2, b"")]
    assert b"".join(out) == b"hello world"
    assert r.exit_code == 3 and r.id == "c4" and h.id == "c4"
    with pytest.raises(warren.ConflictError):
        h.send_stdin("late")


def test_error_answer_is_the_typed_exception():
    body = json.dumps({"error": {"code": "invalid_argument", "message": "cwd: bad",
                                 "field": "cwd"}}).encode()

    def script(conn, rest):
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)

    d = FakeDaemon(script)
    with pytest.raises(warren.InvalidArgumentError) as e:
        Sandbox("0123456789abcdef", socket=d.path).pty.create(cwd="x")
    d.close()
    assert e.value.field == "cwd"


def test_connection_lost_without_exit_frame():
    def script(conn, rest):
        conn.sendall(SWITCH + frame(0, b"partial"))

    d = FakeDaemon(script)
    h = Sandbox("0123456789abcdef", socket=d.path).pty.create()
    with pytest.raises(warren.WarrenConnectionError):
        h.wait(timeout=10)
    d.close()
    assert h.output == b"partial"


def test_kill_half_closes_and_still_gets_the_result():
    def script(conn, rest):
        conn.sendall(SWITCH)
        while conn.recv(4096):  # until the client's half-close
            pass
        conn.sendall(frame(3, json.dumps({"id": "c1", "exit_code": 137, "signal": 9,
                                          "reason": "killed"}).encode()))

    d = FakeDaemon(script)
    h = Sandbox("0123456789abcdef", socket=d.path).pty.create()
    assert h.kill() is True
    r = h.wait(timeout=10)
    d.close()
    assert r.reason == "killed" and h.kill() is False


def test_async_session():
    def script(conn, rest):
        conn.sendall(SWITCH)
        got, rest = read_frames(conn, rest, 2)
        assert got == [(0, b"echo hi\n"), (1, struct.pack(">HH", 24, 80))]
        conn.sendall(frame(0, b"hi\r\n") + frame(3, EXIT))

    d = FakeDaemon(script)

    async def main():
        chunks = []

        async def on_data(b):
            chunks.append(b)

        sb = AsyncSandbox("0123456789abcdef", socket=d.path)
        h = await sb.pty.create(on_data=on_data)
        await h.send_stdin("echo hi\n")
        await h.resize(cols=80, rows=24)
        r = await h.wait(timeout=10)
        return r, b"".join(chunks)

    r, out = asyncio.run(main())
    d.close()
    assert r.exit_code == 3 and out == b"hi\r\n"
