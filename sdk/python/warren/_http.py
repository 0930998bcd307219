"""Connection configuration and the shared HTTP clients (sync and async).

One :class:`httpx.Client` per process and daemon address is shared by every
:class:`~warren.Sandbox`; one :class:`httpx.AsyncClient` per event loop and
daemon address is shared by every :class:`~warren.AsyncSandbox`. Both have a
bounded connection pool (``WARREN_MAX_CONNECTIONS``, default 100); requests
beyond it wait for a free connection instead of failing, which is the
back-pressure an RL driver with thousands of rollouts wants. The API token is
sent per request, so sandboxes of different tenants share a pool.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from dataclasses import dataclass
from typing import (Any, AsyncIterator, Dict, Iterator, List, Optional, Tuple,
                    Union)
from urllib.parse import quote

import httpcore
import httpx

from . import __version__
from .exceptions import (RequestTimeoutError, WarrenConnectionError, WarrenError,
                         error_from_response)

DEFAULT_SOCKET = "/run/warren/warren.sock"
UDS_BASE_URL = "http://warren"
DEFAULT_REQUEST_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0


def _max_connections() -> int:
    try:
        return max(1, int(os.environ.get("WARREN_MAX_CONNECTIONS", "100")))
    except ValueError:
        return 100


@dataclass(frozen=True)
class ConnectionConfig:
    """Where the daemon is and how to authenticate.

    Resolution order: an explicit ``base_url`` (TCP), an explicit ``socket``,
    ``$WARREN_URL`` (TCP), ``$WARREN_SOCKET``, then ``/run/warren/warren.sock``.
    ``api_key`` defaults to ``$WARREN_API_KEY`` (or ``$WARREN_TOKEN``, the
    CLI's name); over TCP it is required, over
    the Unix socket it is optional (without it requests act as the daemon's
    ``unix_tenant``).
    """
    base_url: str
    socket: Optional[str]
    api_key: Optional[str]
    request_timeout: Optional[float]

    @classmethod
    def resolve(cls, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                api_key: Optional[str] = None,
                request_timeout: Optional[float] = None) -> "ConnectionConfig":
        env = os.environ
        if base_url:
            sock = None
        elif socket:
            sock = socket
        elif env.get("WARREN_URL"):
            base_url, sock = env["WARREN_URL"], None
        else:
            sock = env.get("WARREN_SOCKET") or DEFAULT_SOCKET
        if api_key is None:
            api_key = env.get("WARREN_API_KEY") or env.get("WARREN_TOKEN") or None
        if request_timeout is None:
            request_timeout = DEFAULT_REQUEST_TIMEOUT
        return cls(base_url=(base_url or UDS_BASE_URL).rstrip("/"), socket=sock,
                   api_key=api_key, request_timeout=request_timeout)

    @property
    def pool_key(self) -> Tuple[int, str, Optional[str]]:
        return (os.getpid(), self.base_url, self.socket)

    def headers(self) -> Dict[str, str]:
        h = {"User-Agent": f"warren-python/{__version__}"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def timeout(self, seconds: Union[float, None, str] = "default") -> httpx.Timeout:
        """An httpx timeout: ``"default"`` = the configured request timeout,
        ``None`` = no read limit (long polls, streams, foreground commands).
        Waiting for a pooled connection is never a timeout (back-pressure)."""
        if seconds == "default":
            seconds = self.request_timeout
        if seconds is None:
            return httpx.Timeout(None, connect=CONNECT_TIMEOUT, pool=None)
        return httpx.Timeout(float(seconds), connect=min(CONNECT_TIMEOUT, float(seconds)),
                             pool=None)


def _limits() -> httpx.Limits:
    n = _max_connections()
    return httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=30.0)


class _AnswerStream:
    """A connection whose writes stop at the first failed one, so that the
    response is still read: warrend answers a request it refuses (a bad
    field, a body over a limit) before it has read the body and closes the
    connection, and the client then fails writing the rest of the body.
    Without this, httpcore (0.16, Debian 12) raises that write error (a
    broken pipe) and the daemon's 400 with its JSON error is never read;
    httpcore 0.17 and later do the same as this by themselves. Once a write
    failed, the rest of the body is dropped, the answer is read, and the
    connection reports itself readable so the pool never reuses it. A
    server that closed without answering still fails the request (httpcore:
    "Server disconnected without sending a response")."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._broken = False

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        if not self._broken:
            try:
                self._inner.write(buffer, timeout)
            except httpcore.WriteError:
                self._broken = True

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, *a: Any, **kw: Any) -> "_AnswerStream":
        return _AnswerStream(self._inner.start_tls(*a, **kw))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._broken:
            return True
        return self._inner.get_extra_info(info)


def _asyncio_unix_socket(stream: Any) -> Any:
    """The socket under httpcore's stream when it is anyio's asyncio Unix
    socket stream, else None."""
    s = getattr(stream, "_stream", None)
    if type(s).__name__ != "UNIXSocketStream" or \
            not type(s).__module__.startswith("anyio._backends._asyncio"):
        return None
    try:
        import anyio.abc
        return s.extra(anyio.abc.SocketAttribute.raw_socket)
    except Exception:
        return None


class _AsyncAnswerStream(_AnswerStream):
    """:class:`_AnswerStream` for the async pools. Over a Unix socket under
    asyncio, writes go through the loop's ``sock_sendall``: anyio 3.6's
    ``UNIXSocketStream.send`` (Debian 12) sends its buffer from the start
    again after a partial send, so a body larger than the socket's buffer
    (an image upload) reached warrend with its first bytes repeated in the
    middle and the surplus read as the next request."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._sock = _asyncio_unix_socket(inner)

    async def read(self, max_bytes: int,  # type: ignore[override]
                   timeout: Optional[float] = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def _sendall(self, buffer: bytes, timeout: Optional[float]) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_sendall(self._sock, buffer), timeout)
        except asyncio.TimeoutError as e:
            raise httpcore.WriteTimeout(str(e) or "write timed out") from e
        except OSError as e:
            raise httpcore.WriteError(str(e)) from e

    async def write(self, buffer: bytes,  # type: ignore[override]
                    timeout: Optional[float] = None) -> None:
        if self._broken or not buffer:
            return
        try:
            if self._sock is not None:
                await self._sendall(buffer, timeout)
            else:
                await self._inner.write(buffer, timeout)
        except httpcore.WriteError:
            self._broken = True

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, *a: Any, **kw: Any) -> "_AsyncAnswerStream":  # type: ignore
        return _AsyncAnswerStream(await self._inner.start_tls(*a, **kw))


class _AnswerBackend:
    """The pool's network backend with its streams as :class:`_AnswerStream`."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, *a: Any, **kw: Any) -> _AnswerStream:
        return _AnswerStream(self._inner.connect_tcp(*a, **kw))

    def connect_unix_socket(self, *a: Any, **kw: Any) -> _AnswerStream:
        return _AnswerStream(self._inner.connect_unix_socket(*a, **kw))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncAnswerBackend(_AnswerBackend):
    async def connect_tcp(self, *a: Any, **kw: Any) -> _AsyncAnswerStream:  # type: ignore
        return _AsyncAnswerStream(await self._inner.connect_tcp(*a, **kw))

    async def connect_unix_socket(self, *a: Any,  # type: ignore[override]
                                  **kw: Any) -> _AsyncAnswerStream:
        return _AsyncAnswerStream(await self._inner.connect_unix_socket(*a, **kw))

    async def sleep(self, seconds: float) -> None:  # type: ignore[override]
        await self._inner.sleep(seconds)


def _read_answers(transport: Any, wrapper: Any) -> Any:
    """Give the transport's connection pool the answer-reading streams (its
    backend is an attribute of httpx's and httpcore's internals: where a
    release lays them out differently, the transport stays as it is)."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None and not isinstance(backend, _AnswerBackend):
        pool._network_backend = wrapper(backend)
    return transport


_sync_lock = threading.Lock()
_sync_clients: Dict[Tuple[int, str, Optional[str]], httpx.Client] = {}
# loop -> (its pools by address, the async generator that closes them)
_async_clients: Dict[Any, Tuple[Dict[Any, httpx.AsyncClient], Any]] = {}


def _verify(cfg: ConnectionConfig) -> bool:
    # No TLS over the Unix socket or plain http://: skip loading the CA bundle
    # (~0.1 s of blocking work per client otherwise).
    return cfg.socket is None and cfg.base_url.startswith("https://")


def _sync_client(cfg: ConnectionConfig) -> httpx.Client:
    key = cfg.pool_key
    with _sync_lock:
        c = _sync_clients.get(key)
        if c is None or c.is_closed:
            if len(_sync_clients) and any(k[0] != key[0] for k in _sync_clients):
                # forked child: the parent's sockets are not ours to use
                for k in [k for k in _sync_clients if k[0] != key[0]]:
                    del _sync_clients[k]
            transport = _read_answers(
                httpx.HTTPTransport(uds=cfg.socket, limits=_limits(), retries=1,
                                    verify=_verify(cfg)), _AnswerBackend)
            c = httpx.Client(transport=transport, base_url=cfg.base_url)
            _sync_clients[key] = c
        return c


async def _closer(per_loop: Dict[Any, httpx.AsyncClient]) -> AsyncIterator[None]:
    """An async generator parked at its ``yield`` for the life of a loop:
    ``asyncio.run`` finalises every live async generator before closing the
    loop (``shutdown_asyncgens``), which runs this ``finally`` and closes the
    loop's pools instead of leaving their sockets to the garbage collector."""
    try:
        yield
    finally:
        clients = list(per_loop.values())
        per_loop.clear()
        for c in clients:
            try:
                await c.aclose()
            except Exception:
                pass


async def _async_client(cfg: ConnectionConfig) -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    entry = _async_clients.get(loop)
    if entry is None:
        # drop pools of loops that are gone (asyncio.run called repeatedly)
        for old in [lp for lp in _async_clients if lp.is_closed()]:
            del _async_clients[old]
        per_loop: Dict[Any, httpx.AsyncClient] = {}
        closer = _closer(per_loop)
        entry = _async_clients[loop] = (per_loop, closer)
        await closer.asend(None)  # registers it with the loop's asyncgen hooks
    per_loop = entry[0]
    key = cfg.pool_key
    c = per_loop.get(key)
    if c is None or c.is_closed:
        transport = _read_answers(
            httpx.AsyncHTTPTransport(uds=cfg.socket, limits=_limits(), retries=1,
                                     verify=_verify(cfg)), _AsyncAnswerBackend)
        c = httpx.AsyncClient(transport=transport, base_url=cfg.base_url)
        per_loop[key] = c
    return c


def close_shared_clients() -> None:
    """Close the process's shared synchronous connection pools."""
    with _sync_lock:
        for c in _sync_clients.values():
            c.close()
        _sync_clients.clear()


async def aclose_shared_clients() -> None:
    """Close the current event loop's shared asynchronous connection pools
    (done automatically when ``asyncio.run`` ends; the next call opens new ones)."""
    entry = _async_clients.get(asyncio.get_running_loop())
    if entry is None:
        return
    clients = list(entry[0].values())
    entry[0].clear()
    for c in clients:
        await c.aclose()


def seg(value: str) -> str:
    """Quote one path segment (a sandbox or command id)."""
    return quote(str(value), safe="")


Params = Union[None, Dict[str, Any], List[Tuple[str, Any]]]


def _clean_params(params: Params) -> Optional[List[Tuple[str, str]]]:
    if params is None:
        return None
    items = params.items() if isinstance(params, dict) else params
    out = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        out.append((k, str(v)))
    return out


@contextlib.contextmanager
def _translate() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as e:
        raise RequestTimeoutError(f"request timed out: {type(e).__name__}: {e}") from e
    except (httpx.ConnectError, httpx.NetworkError, httpx.RemoteProtocolError) as e:
        raise WarrenConnectionError(f"cannot talk to warrend: {e}") from e
    except httpx.TransportError as e:
        raise WarrenConnectionError(f"HTTP transport failure: {e}") from e


def _json(resp: httpx.Response) -> Any:
    if resp.status_code == 204 or not resp.content:
        return None
    try:
        return resp.json()
    except ValueError as e:
        raise WarrenError(f"daemon sent a body that is not JSON ({resp.status_code}): "
                          f"{resp.content[:200]!r}", code="bad_response",
                          status=resp.status_code) from e


class SyncHTTP:
    """The synchronous request helper bound to one :class:`ConnectionConfig`."""

    def __init__(self, cfg: ConnectionConfig) -> None:
        self.cfg = cfg

    @property
    def client(self) -> httpx.Client:
        return _sync_client(self.cfg)

    def _build(self, method: str, path: str, params: Params, json: Any, content: Any,
               headers: Optional[Dict[str, str]], timeout: Any) -> httpx.Request:
        h = self.cfg.headers()
        if headers:
            h.update(headers)
        return self.client.build_request(method, "/v1" + path, params=_clean_params(params),
                                         json=json, content=content, headers=h,
                                         timeout=self.cfg.timeout(timeout))

    def request(self, method: str, path: str, *, params: Params = None, json: Any = None,
                content: Any = None, headers: Optional[Dict[str, str]] = None,
                timeout: Any = "default") -> httpx.Response:
        req = self._build(method, path, params, json, content, headers, timeout)
        with _translate():
            resp = self.client.send(req)
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, resp.content)
        return resp

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return _json(self.request(method, path, **kw))

    @contextlib.contextmanager
    def stream(self, method: str, path: str, *, params: Params = None, json: Any = None,
               headers: Optional[Dict[str, str]] = None,
               timeout: Any = None) -> Iterator[httpx.Response]:
        """Send a request and yield the response with its body unread."""
        req = self._build(method, path, params, json, None, headers, timeout)
        with _translate():
            resp = self.client.send(req, stream=True)
        try:
            if resp.status_code >= 400:
                with _translate():
                    body = resp.read()
                raise error_from_response(resp.status_code, body)
            yield resp
        finally:
            resp.close()

    def iter_bytes(self, resp: httpx.Response) -> Iterator[bytes]:
        with _translate():
            for chunk in resp.iter_bytes():
                if chunk:
                    yield chunk


class AsyncHTTP:
    """The asynchronous request helper bound to one :class:`ConnectionConfig`."""

    def __init__(self, cfg: ConnectionConfig) -> None:
        self.cfg = cfg

    async def client(self) -> httpx.AsyncClient:
        return await _async_client(self.cfg)

    def _build(self, client: httpx.AsyncClient, method: str, path: str, params: Params,
               json: Any, content: Any, headers: Optional[Dict[str, str]],
               timeout: Any) -> httpx.Request:
        h = self.cfg.headers()
        if headers:
            h.update(headers)
        return client.build_request(method, "/v1" + path, params=_clean_params(params),
                                    json=json, content=content, headers=h,
                                    timeout=self.cfg.timeout(timeout))

    async def request(self, method: str, path: str, *, params: Params = None,
                      json: Any = None, content: Any = None,
                      headers: Optional[Dict[str, str]] = None,
                      timeout: Any = "default") -> httpx.Response:
        client = await self.client()
        req = self._build(client, method, path, params, json, content, headers, timeout)
        with _translate():
            resp = await client.send(req)
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, resp.content)
        return resp

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        return _json(await self.request(method, path, **kw))

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, *, params: Params = None,
                     json: Any = None, headers: Optional[Dict[str, str]] = None,
                     timeout: Any = None) -> AsyncIterator[httpx.Response]:
        client = await self.client()
        req = self._build(client, method, path, params, json, None, headers, timeout)
        with _translate():
            resp = await client.send(req, stream=True)
        try:
            if resp.status_code >= 400:
                with _translate():
                    body = await resp.aread()
                raise error_from_response(resp.status_code, body)
            yield resp
        finally:
            await resp.aclose()

    async def iter_bytes(self, resp: httpx.Response) -> AsyncIterator[bytes]:
        with _translate():
            async for chunk in resp.aiter_bytes():
                if chunk:
                    yield chunk
