"""Interactive terminals: ``sandbox.pty`` (sync) and ``AsyncSandbox.pty``.

``GET /v1/sandboxes/{id}/pty`` upgraded to the ``warren-pty/1`` protocol
(docs/API.md): after ``101 Switching Protocols`` both directions carry frames
of ``type (1 byte) | length (4 bytes, big-endian) | payload``. httpx cannot
hand over an upgraded connection, so this module speaks HTTP/1.1 itself for
the one request on a socket of its own (Unix socket or TCP, TLS for
``https://``), reads the answer's head and maps any answer other than 101 to
the usual typed exception.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import socket
import ssl
import struct
import threading
from typing import (Any, Awaitable, Callable, Generator, List, Mapping, Optional, Sequence,
                    Tuple, Union)
from urllib.parse import urlencode, urlsplit

from ._http import ConnectionConfig, seg
from .exceptions import (CommandExitError, ConflictError, RequestTimeoutError,
                         WarrenConnectionError, WarrenError, error_from_response)
from .models import CommandResult

__all__ = ["Pty", "PtyHandle", "AsyncPty", "AsyncPtyHandle"]

PROTO = "warren-pty/1"
FR_DATA, FR_RESIZE, FR_EOF, FR_EXIT = 0, 1, 2, 3
SEND_FRAME_MAX = 1 << 20  # the daemon's limit per client frame
READ_FRAME_MAX = 16 << 20  # far above anything the daemon sends
HEAD_MAX = 16 << 10
ERROR_BODY_MAX = 1 << 20

DataCallback = Callable[[bytes], Any]
AsyncDataCallback = Callable[[bytes], Union[Any, Awaitable[Any]]]


# ---- the request and the frames (shared) ------------------------------------

def _check_size(cols: int, rows: int) -> None:
    for name, v in (("cols", cols), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
            raise ValueError(f"{name} must be an integer from 1 to 65535")


def _request(cfg: ConnectionConfig, sandbox_id: str, cmd: Union[str, Sequence[str], None],
             cols: int, rows: int, cwd: Optional[str], envs: Optional[Mapping[str, str]],
             user: Optional[int]) -> bytes:
    _check_size(cols, rows)
    q: List[Tuple[str, str]] = []
    if cmd is not None:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv or not argv[0]:
            raise ValueError("cmd must not be empty")
        q += [("cmd", a) for a in argv]
    q += [("rows", str(rows)), ("cols", str(cols))]
    if cwd is not None:
        q.append(("cwd", cwd))
    if user is not None:
        q.append(("user", str(int(user))))
    for k, v in (envs or {}).items():
        if not k or "=" in k:
            raise ValueError(f"envs: invalid variable name {k!r}")
        q.append(("env", f"{k}={v}"))
    u = urlsplit(cfg.base_url)
    host = "warren" if cfg.socket else (u.netloc or "localhost")
    path = (u.path.rstrip("/") + f"/v1/sandboxes/{seg(sandbox_id)}/pty?" + urlencode(q))
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: Upgrade",
             f"Upgrade: {PROTO}"]
    lines += [f"{k}: {v}" for k, v in cfg.headers().items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def _parse_head(head: bytes) -> Tuple[int, dict]:
    text = head.decode("iso-8859-1")
    status_line, _, rest = text.partition("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise WarrenError(f"daemon sent a bad status line: {status_line[:100]!r}",
                          code="bad_response")
    headers = {}
    for line in rest.split("\r\n"):
        k, sep, v = line.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


def _handshake() -> Generator[int, bytes, bytes]:
    """The answer to the upgrade request, without I/O (the sync and async
    sides drive it): yields how many bytes to read at most, is sent what the
    read returned (b"" at the end); returns what followed a 101's head, and
    raises the typed exception for any other answer."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) > HEAD_MAX:
            raise WarrenError("pty: answer head too large", code="bad_response")
        chunk = yield 4096
        if not chunk:
            raise WarrenConnectionError("pty: the daemon closed the connection before answering")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    status, headers = _parse_head(head)
    if status == 101:
        if PROTO not in headers.get("upgrade", "").lower():
            raise WarrenError("pty: the daemon switched to another protocol",
                              code="bad_response")
        return rest
    body = bytearray(rest)
    n = int(headers.get("content-length", "0") or 0)
    while len(body) < min(n, ERROR_BODY_MAX):
        chunk = yield 65536
        if not chunk:
            break
        body += chunk
    raise error_from_response(status, bytes(body[:n]))


def _frame(ftype: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BI", ftype, len(payload)) + payload


def _data_frames(data: Union[str, bytes]) -> List[bytes]:
    b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return [_frame(FR_DATA, b[i:i + SEND_FRAME_MAX]) for i in range(0, len(b), SEND_FRAME_MAX)]


def _resize_frame(cols: int, rows: int) -> bytes:
    _check_size(cols, rows)
    return _frame(FR_RESIZE, struct.pack(">HH", rows, cols))


def _exit_result(payload: bytes) -> CommandResult:
    try:
        d = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise WarrenError("pty: the exit frame is not JSON", code="bad_response") from e
    r = CommandResult.from_json(d)
    if r.id is None:
        r.id = d.get("id")
    return r


def _lost() -> WarrenConnectionError:
    return WarrenConnectionError("pty: the daemon closed the connection without an exit frame")


# ---- sync ---------------------------------------------------------------------

def _connect(cfg: ConnectionConfig) -> socket.socket:
    timeout = min(10.0, cfg.request_timeout or 10.0)
    try:
        if cfg.socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(cfg.socket)
        else:
            u = urlsplit(cfg.base_url)
            tls = u.scheme == "https"
            s = socket.create_connection((u.hostname or "localhost",
                                          u.port or (443 if tls else 80)), timeout=timeout)
            if tls:
                s = ssl.create_default_context().wrap_socket(s, server_hostname=u.hostname)
    except OSError as e:
        where = cfg.socket or cfg.base_url
        raise WarrenConnectionError(f"cannot talk to warrend at {where}: {e}") from e
    return s


class PtyHandle:
    """A command on a terminal in the sandbox (from :meth:`Pty.create`).

    Terminal output goes to ``on_data`` (bytes, from a reader thread) or,
    without it, accumulates in :attr:`output`. The session ends when the
    command exits (:meth:`wait` returns its result) or is killed
    (:meth:`kill`).
    """

    def __init__(self, sock: socket.socket, rest: bytes,
                 on_data: Optional[DataCallback]) -> None:
        self._sock = sock
        self._buf = bytearray(rest)
        self._on_data = on_data
        self._send_lock = threading.Lock()
        self._out = bytearray()
        self._out_lock = threading.Lock()
        self._result: Optional[CommandResult] = None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()
        self._closed_write = False
        self._thread = threading.Thread(target=self._reader, name="warren-pty", daemon=True)
        self._thread.start()

    @property
    def id(self) -> Optional[str]:
        """The command's id once it has exited (it is listed among the
        sandbox's commands)."""
        return self._result.id if self._result else None

    @property
    def output(self) -> bytes:
        """Terminal output received so far (only without ``on_data``)."""
        with self._out_lock:
            return bytes(self._out)

    @property
    def result(self) -> Optional[CommandResult]:
        return self._result

    def _recv_exact(self, n: int) -> Optional[bytes]:
        while len(self._buf) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                return None
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _reader(self) -> None:
        try:
            self._sock.settimeout(None)
            while True:
                hdr = self._recv_exact(5)
                if hdr is None:
                    raise _lost()
                ftype, n = struct.unpack(">BI", hdr)
                if n > READ_FRAME_MAX:
                    raise WarrenError(f"pty: frame of {n} bytes", code="bad_response")
                payload = self._recv_exact(n)
                if payload is None:
                    raise _lost()
                if ftype == FR_DATA:
                    if self._on_data is not None:
                        self._on_data(payload)
                    else:
                        with self._out_lock:
                            self._out += payload
                elif ftype == FR_EXIT:
                    self._result = _exit_result(payload)
                    return
                else:
                    raise WarrenError(f"pty: unknown frame type {ftype}", code="bad_response")
        except OSError as e:
            self._error = WarrenConnectionError(f"pty: connection failed: {e}")
        except BaseException as e:  # noqa: BLE001 - reported by wait()
            self._error = e
        finally:
            self._done.set()
            try:
                self._sock.close()
            except OSError:
                pass

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            if self._closed_write or self._done.is_set():
                raise ConflictError("pty: the session is over")
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise WarrenConnectionError(f"pty: send failed: {e}") from e

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Type ``data`` into the terminal (text is sent as UTF-8)."""
        for f in _data_frames(data):
            self._send(f)

    def send_eof(self) -> None:
        """End of input: once everything typed so far has been read, the
        terminal's EOF (``^D``) is typed; a shell then exits."""
        self._send(_frame(FR_EOF))

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size; the command gets ``SIGWINCH``."""
        self._send(_resize_frame(cols, rows))

    def kill(self) -> bool:
        """Kill the command's whole process tree (the session's write side is
        closed; its result, reason ``killed``, still arrives). False if the
        session was already over."""
        with self._send_lock:
            if self._closed_write or self._done.is_set():
                return False
            self._closed_write = True
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                return False
        return True

    def wait(self, timeout: Optional[float] = None, *, check: bool = False) -> CommandResult:
        """Block until the command ends; its result (``exit_code``,
        ``reason``...; output went to the terminal, not to ``stdout``).
        ``check=True`` raises :class:`CommandExitError` unless it exited 0."""
        if not self._done.wait(timeout):
            raise RequestTimeoutError(f"pty: still running after {timeout}s")
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        if check and not self._result.ok:
            raise CommandExitError(self._result)
        return self._result

    def close(self) -> None:
        """Leave: kill the command if it still runs and drop the connection."""
        self.kill()
        self._done.wait(10)
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> "PtyHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _handshake_sync(sock: socket.socket, req: bytes) -> bytes:
    sock.sendall(req)
    steps = _handshake()
    try:
        want = next(steps)
        while True:
            want = steps.send(sock.recv(want))
    except StopIteration as done:
        return done.value


class Pty:
    """``sandbox.pty``: interactive terminals."""

    def __init__(self, sandbox: Any) -> None:
        self._sb = sandbox

    def create(self, cols: int = 80, rows: int = 24, on_data: Optional[DataCallback] = None,
               cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
               cmd: Union[str, Sequence[str], None] = None,
               user: Optional[int] = None) -> PtyHandle:
        """Start ``cmd`` (default ``/bin/sh``; a string runs with ``sh -c``)
        on a new ``cols`` x ``rows`` terminal and return its handle.

        Errors before the switch raise the usual typed exceptions
        (:class:`NotFoundError`, :class:`ConflictError`, ...)."""
        cfg = self._sb._http.cfg
        req = _request(cfg, self._sb.sandbox_id, cmd, cols, rows, cwd, envs, user)
        sock = _connect(cfg)
        try:
            sock.settimeout(cfg.request_timeout)
            rest = _handshake_sync(sock, req)
        except socket.timeout as e:
            sock.close()
            raise RequestTimeoutError("pty: no answer from the daemon") from e
        except OSError as e:
            sock.close()
            raise WarrenConnectionError(f"pty: {e}") from e
        except BaseException:
            sock.close()
            raise
        return PtyHandle(sock, rest, on_data)


# ---- async --------------------------------------------------------------------

class AsyncPtyHandle:
    """The asyncio twin of :class:`PtyHandle`: a reader task delivers output
    to ``on_data`` (a function or a coroutine function)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 rest: bytes, on_data: Optional[AsyncDataCallback]) -> None:
        self._r = reader
        self._w = writer
        self._buf = bytearray(rest)
        self._on_data = on_data
        self._out = bytearray()
        self._result: Optional[CommandResult] = None
        self._error: Optional[BaseException] = None
        self._closed_write = False
        self._send_lock = asyncio.Lock()
        self._task = asyncio.ensure_future(self._reader())

    @property
    def id(self) -> Optional[str]:
        return self._result.id if self._result else None

    @property
    def output(self) -> bytes:
        return bytes(self._out)

    @property
    def result(self) -> Optional[CommandResult]:
        return self._result

    async def _recv_exact(self, n: int) -> Optional[bytes]:
        while len(self._buf) < n:
            chunk = await self._r.read(65536)
            if not chunk:
                return None
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def _reader(self) -> None:
        try:
            while True:
                hdr = await self._recv_exact(5)
                if hdr is None:
                    raise _lost()
                ftype, n = struct.unpack(">BI", hdr)
                if n > READ_FRAME_MAX:
                    raise WarrenError(f"pty: frame of {n} bytes", code="bad_response")
                payload = await self._recv_exact(n)
                if payload is None:
                    raise _lost()
                if ftype == FR_DATA:
                    if self._on_data is not None:
                        r = self._on_data(payload)
                        if inspect.isawaitable(r):
                            await r
                    else:
                        self._out += payload
                elif ftype == FR_EXIT:
                    self._result = _exit_result(payload)
                    return
                else:
                    raise WarrenError(f"pty: unknown frame type {ftype}", code="bad_response")
        except OSError as e:
            self._error = WarrenConnectionError(f"pty: connection failed: {e}")
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - reported by wait()
            self._error = e
        finally:
            self._w.close()

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            if self._closed_write or self._task.done():
                raise ConflictError("pty: the session is over")
            try:
                self._w.write(data)
                await self._w.drain()
            except OSError as e:
                raise WarrenConnectionError(f"pty: send failed: {e}") from e

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        for f in _data_frames(data):
            await self._send(f)

    async def send_eof(self) -> None:
        await self._send(_frame(FR_EOF))

    async def resize(self, cols: int, rows: int) -> None:
        await self._send(_resize_frame(cols, rows))

    async def kill(self) -> bool:
        async with self._send_lock:
            if self._closed_write or self._task.done():
                return False
            self._closed_write = True
            try:
                if self._w.can_write_eof():
                    self._w.write_eof()
                else:
                    self._w.close()
            except OSError:
                return False
        return True

    async def wait(self, timeout: Optional[float] = None, *,
                   check: bool = False) -> CommandResult:
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.TimeoutError as e:
            raise RequestTimeoutError(f"pty: still running after {timeout}s") from e
        if self._error is not None:
            raise self._error
        assert self._result is not None
        if check and not self._result.ok:
            raise CommandExitError(self._result)
        return self._result

    async def close(self) -> None:
        await self.kill()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except (asyncio.TimeoutError, Exception):
            self._task.cancel()
        self._w.close()

    async def __aenter__(self) -> "AsyncPtyHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _open_async(cfg: ConnectionConfig) -> Tuple[asyncio.StreamReader,
                                                       asyncio.StreamWriter]:
    timeout = min(10.0, cfg.request_timeout or 10.0)
    try:
        if cfg.socket:
            return await asyncio.wait_for(asyncio.open_unix_connection(cfg.socket), timeout)
        u = urlsplit(cfg.base_url)
        tls = u.scheme == "https"
        return await asyncio.wait_for(
            asyncio.open_connection(u.hostname or "localhost", u.port or (443 if tls else 80),
                                    ssl=ssl.create_default_context() if tls else None),
            timeout)
    except (OSError, asyncio.TimeoutError) as e:
        where = cfg.socket or cfg.base_url
        raise WarrenConnectionError(f"cannot talk to warrend at {where}: {e}") from e


async def _handshake_async(r: asyncio.StreamReader, w: asyncio.StreamWriter,
                           req: bytes) -> bytes:
    w.write(req)
    await w.drain()
    steps = _handshake()
    try:
        want = next(steps)
        while True:
            want = steps.send(await r.read(want))
    except StopIteration as done:
        return done.value


class AsyncPty:
    """``AsyncSandbox.pty``: the same as :class:`Pty`, as coroutines."""

    def __init__(self, sandbox: Any) -> None:
        self._sb = sandbox

    async def create(self, cols: int = 80, rows: int = 24,
                     on_data: Optional[AsyncDataCallback] = None, cwd: Optional[str] = None,
                     envs: Optional[Mapping[str, str]] = None,
                     cmd: Union[str, Sequence[str], None] = None,
                     user: Optional[int] = None) -> AsyncPtyHandle:
        cfg = self._sb._http.cfg
        req = _request(cfg, self._sb.sandbox_id, cmd, cols, rows, cwd, envs, user)
        r, w = await _open_async(cfg)
        try:
            rest = await asyncio.wait_for(_handshake_async(r, w, req), cfg.request_timeout)
        except asyncio.TimeoutError as e:
            w.close()
            raise RequestTimeoutError("pty: no answer from the daemon") from e
        except OSError as e:
            w.close()
            raise WarrenConnectionError(f"pty: {e}") from e
        except BaseException:
            w.close()
            raise
        return AsyncPtyHandle(r, w, rest, on_data)
