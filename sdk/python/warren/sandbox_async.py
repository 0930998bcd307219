"""The asyncio client: :class:`AsyncSandbox`, same names as :class:`~warren.Sandbox`,
every call a coroutine, on a shared bounded :class:`httpx.AsyncClient` per event loop."""
from __future__ import annotations

import asyncio
import inspect
import os
import tempfile
import time
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, List,
                    Mapping, Optional, Sequence, Tuple, Union)

from ._common import (Cmd, StreamState, async_write_content, bool_value, create_body,
                      drop_none, is_running_state, list_params, mode_str, pause_body,
                      run_body, text)
from ._http import AsyncHTTP, ConnectionConfig, seg
from ._ndjson import NDJSONDecoder
from ._tar import build_tar, safe_extract
from .exceptions import CommandExitError, ConflictError, NotFoundError, RequestTimeoutError
from .models import CommandInfo, CommandResult, EntryInfo, Event, SandboxInfo, UploadResult
from .network import AsyncNetwork
from .ports import AsyncPorts
from .pty import AsyncPty
from .sandbox import WAIT_POLL, _cmd_timeout

__all__ = ["AsyncSandbox", "AsyncCommands", "AsyncCommandHandle", "AsyncFiles",
           "AsyncByteStream"]

OutputCallback = Callable[[str], Union[Any, Awaitable[Any]]]


async def _call(cb: Optional[OutputCallback], data: str) -> None:
    if cb is None:
        return
    r = cb(data)
    if inspect.isawaitable(r):
        await r


async def _dispatch(st: StreamState, obj: Any, on_out: Optional[OutputCallback],
                    on_err: Optional[OutputCallback]) -> None:
    out = st.handle(obj)
    if out is None:
        return
    await _call(on_out if out[0] == "stdout" else on_err, out[1])


class AsyncCommandHandle:
    """A background command. ``async for stdout, stderr in handle`` follows its
    output from the start; the other methods are coroutines."""

    def __init__(self, sandbox: "AsyncSandbox", cmd_id: str, pid: Optional[int] = None,
                 on_stdout: Optional[OutputCallback] = None,
                 on_stderr: Optional[OutputCallback] = None) -> None:
        self._sb = sandbox
        self.id = cmd_id
        self.pid = pid
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr
        self._result: Optional[CommandResult] = None

    @property
    def sandbox_id(self) -> str:
        return self._sb.sandbox_id

    @property
    def _path(self) -> str:
        return f"/sandboxes/{seg(self._sb.sandbox_id)}/commands/{seg(self.id)}"

    @property
    def result(self) -> Optional[CommandResult]:
        return self._result

    def __repr__(self) -> str:
        return (f"AsyncCommandHandle(sandbox_id={self.sandbox_id!r}, id={self.id!r}, "
                f"pid={self.pid!r})")

    async def __aiter__(self) -> AsyncIterator[Tuple[Optional[str], Optional[str]]]:
        st = StreamState()
        dec = NDJSONDecoder()
        http = self._sb._http
        async with http.stream("GET", self._path + "/stream", timeout=None) as resp:
            async for chunk in http.iter_bytes(resp):
                for obj in dec.feed(chunk):
                    out = st.handle(obj)
                    if out:
                        yield (out[1], None) if out[0] == "stdout" else (None, out[1])
            for obj in dec.close():
                out = st.handle(obj)
                if out:
                    yield (out[1], None) if out[0] == "stdout" else (None, out[1])
        self._result = st.result(self.id)

    async def get_info(self) -> CommandInfo:
        return CommandInfo.from_json(await self._sb._http.json("GET", self._path))

    async def wait(self, timeout: Optional[float] = None, *, check: bool = False,
                   on_stdout: Optional[OutputCallback] = None,
                   on_stderr: Optional[OutputCallback] = None) -> CommandResult:
        """Wait for the command to end; see :meth:`warren.CommandHandle.wait`.
        Callbacks may be plain functions or coroutine functions."""
        if self._result is None:
            on_out = on_stdout or self._on_stdout
            on_err = on_stderr or self._on_stderr
            if on_out or on_err:
                st = StreamState()
                dec = NDJSONDecoder()
                http = self._sb._http
                try:
                    async with http.stream("GET", self._path + "/stream",
                                           timeout=None) as resp:
                        async def pump() -> None:
                            async for chunk in http.iter_bytes(resp):
                                for obj in dec.feed(chunk):
                                    await _dispatch(st, obj, on_out, on_err)
                            for obj in dec.close():
                                await _dispatch(st, obj, on_out, on_err)
                        await asyncio.wait_for(pump(), timeout)
                except asyncio.TimeoutError:
                    raise RequestTimeoutError(
                        f"command {self.id} still running after {timeout}s") from None
                self._result = st.result(self.id)
            else:
                self._result = await self._poll(timeout)
        if check and not self._result.ok:
            raise CommandExitError(self._result)
        return self._result

    async def _poll(self, timeout: Optional[float]) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            poll = WAIT_POLL
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimeoutError(f"command {self.id} still running after {timeout}s")
                poll = max(1, min(WAIT_POLL, int(left + 0.999)))
            d = await self._sb._http.json("GET", self._path + "/wait",
                                          params={"timeout": poll}, timeout=poll + 30)
            if not is_running_state(d):
                r = CommandResult.from_json(d)
                if r.id is None:
                    r.id = self.id
                return r

    async def kill(self) -> bool:
        try:
            await self._sb._http.request("DELETE", self._path)
            return True
        except (NotFoundError, ConflictError):
            return False

    async def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> None:
        await self._sb._http.request("POST", self._path + "/stdin",
                                     json={"data": text(data, "stdin") or "", "eof": bool(eof)})

    async def close_stdin(self) -> None:
        await self.send_stdin("", eof=True)


class AsyncCommands:
    """``sandbox.commands`` of an :class:`AsyncSandbox`."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/sandboxes/{seg(self._sb.sandbox_id)}/commands"

    async def run(self, cmd: Cmd, background: bool = False,
                  envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                  user: Union[int, str, None] = None,
                  on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None,
                  stdin: Union[str, bytes, None] = None, timeout: Optional[float] = None, *,
                  check: bool = False, output_cap: Optional[int] = None,
                  request_timeout: Optional[float] = None) -> Any:
        """Run a command; see :meth:`warren.Commands.run`. Returns a
        :class:`CommandResult`, or an :class:`AsyncCommandHandle` with ``background=True``."""
        streaming = not background and (on_stdout is not None or on_stderr is not None)
        body = run_body(cmd, envs=envs, cwd=cwd, user=user, stdin=stdin, timeout=timeout,
                        output_cap=output_cap, background=background, stream=streaming)
        http = self._sb._http
        if background:
            d = await http.json("POST", self._path, json=body)
            return AsyncCommandHandle(self._sb, str(d["id"]), d.get("pid"), on_stdout,
                                      on_stderr)
        rt = _cmd_timeout(timeout, request_timeout)
        if streaming:
            st = StreamState()
            dec = NDJSONDecoder()
            async with http.stream("POST", self._path, json=body, timeout=rt) as resp:
                async for chunk in http.iter_bytes(resp):
                    for obj in dec.feed(chunk):
                        await _dispatch(st, obj, on_stdout, on_stderr)
                for obj in dec.close():
                    await _dispatch(st, obj, on_stdout, on_stderr)
            result = st.result()
        else:
            result = CommandResult.from_json(await http.json("POST", self._path, json=body,
                                                             timeout=rt))
        if check and not result.ok:
            raise CommandExitError(result)
        return result

    async def list(self) -> List[CommandInfo]:
        d = await self._sb._http.json("GET", self._path)
        return [CommandInfo.from_json(c) for c in (d or {}).get("commands", [])]

    async def kill(self, cmd_id: str) -> bool:
        return await AsyncCommandHandle(self._sb, cmd_id).kill()

    async def connect(self, cmd_id: str, on_stdout: Optional[OutputCallback] = None,
                      on_stderr: Optional[OutputCallback] = None) -> AsyncCommandHandle:
        h = AsyncCommandHandle(self._sb, cmd_id, None, on_stdout, on_stderr)
        h.pid = (await h.get_info()).pid
        return h

    async def send_stdin(self, cmd_id: str, data: Union[str, bytes], eof: bool = False) -> None:
        await AsyncCommandHandle(self._sb, cmd_id).send_stdin(data, eof)


class AsyncByteStream:
    """An async iterator of byte chunks of a download; ``await aclose()`` it
    (or use ``async with``) if you stop before the end."""

    def __init__(self, chunks: AsyncIterator[bytes],
                 closer: Callable[[], Awaitable[Any]]) -> None:
        self._chunks = chunks
        self._closer: Optional[Callable[[], Awaitable[Any]]] = closer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                yield chunk
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        closer, self._closer = self._closer, None
        if closer is not None:
            await closer()

    async def __aenter__(self) -> "AsyncByteStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncFiles:
    """``sandbox.files`` of an :class:`AsyncSandbox`; see :class:`warren.Files`."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/sandboxes/{seg(self._sb.sandbox_id)}/files"

    async def read(self, path: str, format: str = "text",
                   request_timeout: Optional[float] = None) -> Any:
        """``format``: ``"text"``, ``"bytes"``, or ``"stream"`` (an
        :class:`AsyncByteStream` of chunks). :class:`NotFoundError` if missing."""
        if format == "stream":
            return await self._stream(path, request_timeout)
        if format not in ("text", "bytes"):
            raise ValueError('format must be "text", "bytes" or "stream"')
        rt = "default" if request_timeout is None else request_timeout
        resp = await self._sb._http.request("GET", self._path, params={"path": path},
                                            timeout=rt)
        return resp.content if format == "bytes" else resp.content.decode("utf-8")

    async def _stream(self, path: str, request_timeout: Optional[float]) -> "AsyncByteStream":
        http = self._sb._http
        rt = "default" if request_timeout is None else request_timeout
        cm = http.stream("GET", self._path, params={"path": path}, timeout=rt)
        resp = await cm.__aenter__()  # errors (404, 400) surface here
        return AsyncByteStream(http.iter_bytes(resp), lambda: cm.__aexit__(None, None, None))

    async def write(self, path: str, data: Any, *, mode: Union[int, str, None] = None,
                    parents: bool = True,
                    request_timeout: Optional[float] = None) -> EntryInfo:
        """Write a file; ``data``: str, bytes, a binary file object, an
        ``os.PathLike``, an iterable or async iterable of bytes (streamed)."""
        content, headers, closer = async_write_content(data)
        rt = "default" if request_timeout is None else request_timeout
        try:
            d = await self._sb._http.json("PUT", self._path, content=content, headers=headers,
                                          params={"path": path, "mode": mode_str(mode),
                                                  "parents": parents}, timeout=rt)
        finally:
            if closer:
                closer()
        return EntryInfo.from_json(d or {"path": path})

    async def write_files(self, files: Iterable[Any]) -> List[EntryInfo]:
        out = []
        for f in files:
            p, data = (f["path"], f["data"]) if isinstance(f, Mapping) else f
            out.append(await self.write(p, data))
        return out

    async def list(self, path: str, depth: int = 1) -> List[EntryInfo]:
        d = await self._sb._http.json("GET", self._path + "/list",
                                      params={"path": path, "depth": depth})
        return [EntryInfo.from_json(e) for e in (d or {}).get("entries", [])]

    async def exists(self, path: str) -> bool:
        d = await self._sb._http.json("GET", self._path + "/exists", params={"path": path})
        return bool((d or {}).get("exists"))

    async def get_info(self, path: str) -> EntryInfo:
        return EntryInfo.from_json(await self._sb._http.json("GET", self._path + "/stat",
                                                             params={"path": path}))

    async def remove(self, path: str, recursive: bool = True) -> None:
        await self._sb._http.request("DELETE", self._path,
                                     params={"path": path, "recursive": recursive})

    async def rename(self, old_path: str, new_path: str) -> EntryInfo:
        return EntryInfo.from_json(await self._sb._http.json(
            "POST", self._path + "/rename", json={"from": old_path, "to": new_path}))

    async def make_dir(self, path: str, parents: bool = True,
                       mode: Union[int, str, None] = None) -> bool:
        # parents=false first: an existing directory is then a conflict (mkdir -p
        # would succeed silently); retry with parents only if one is missing.
        for with_parents in (False, True):
            try:
                await self._sb._http.json("POST", self._path + "/mkdir", json=drop_none({
                    "path": path, "parents": with_parents, "mode": mode_str(mode)}))
                return True
            except ConflictError:
                return False
            except NotFoundError:
                if not parents or with_parents:
                    raise
        return False  # not reached

    async def upload_dir(self, local_dir: Union[str, "os.PathLike[str]"], remote_dir: str,
                         request_timeout: Optional[float] = None) -> UploadResult:
        f, size, _ = await asyncio.to_thread(build_tar, os.fspath(local_dir))
        try:
            await self.make_dir(remote_dir)

            async def chunks() -> AsyncIterator[bytes]:
                while True:
                    b = await asyncio.to_thread(f.read, 1 << 20)
                    if not b:
                        return
                    yield b
            rt = "default" if request_timeout is None else request_timeout
            d = await self._sb._http.json(
                "PUT", self._path + "/tar", params={"path": remote_dir}, content=chunks(),
                timeout=rt,
                headers={"Content-Type": "application/x-tar", "Content-Length": str(size)})
        finally:
            f.close()
        return UploadResult.from_json(d or {})

    async def download_dir(self, remote_dir: str, local_dir: Union[str, "os.PathLike[str]"],
                           request_timeout: Optional[float] = None) -> int:
        http = self._sb._http
        rt = "default" if request_timeout is None else request_timeout
        with tempfile.SpooledTemporaryFile(max_size=16 << 20) as spool:
            async with http.stream("GET", self._path + "/tar", params={"path": remote_dir},
                                   timeout=rt) as resp:
                async for chunk in http.iter_bytes(resp):
                    spool.write(chunk)
            spool.seek(0)
            return await asyncio.to_thread(safe_extract, spool, os.fspath(local_dir))


class AsyncSandbox:
    """A warren sandbox driven from asyncio. Same API as :class:`warren.Sandbox`
    with coroutines; ``async with await AsyncSandbox.create(...) as sb:`` kills
    it on exit.

    All AsyncSandbox objects of one event loop share one bounded connection
    pool per daemon address (``WARREN_MAX_CONNECTIONS``, default 100), so
    thousands of concurrent rollouts queue for connections instead of
    exhausting file descriptors.
    """

    def __init__(self, sandbox_id: str, *, socket: Optional[str] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None,
                 _config: Optional[ConnectionConfig] = None,
                 _info: Optional[SandboxInfo] = None) -> None:
        cfg = _config or ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                  api_key=api_key,
                                                  request_timeout=request_timeout)
        self._http = AsyncHTTP(cfg)
        self._id = sandbox_id
        self._info = _info
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)
        self.pty = AsyncPty(self)
        self.network = AsyncNetwork(self)
        self.ports = AsyncPorts(self)

    @property
    def sandbox_id(self) -> str:
        return self._id

    id = sandbox_id

    @property
    def info(self) -> Optional[SandboxInfo]:
        return self._info

    def __repr__(self) -> str:
        return f"AsyncSandbox(sandbox_id={self._id!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.kill()
        else:
            try:
                await self.kill()
            except Exception:
                pass

    @classmethod
    async def create(cls, image: Optional[str] = None, *, tier: Optional[str] = "container",
                     cpu: Optional[float] = None, memory_mb: Optional[int] = None,
                     disk_mb: Optional[int] = None, pids: Optional[int] = None,
                     envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                     user: Union[int, str, None] = None,
                     metadata: Optional[Mapping[str, str]] = None,
                     labels: Optional[Mapping[str, str]] = None,
                     timeout: Optional[int] = None, idle_timeout: Optional[int] = None,
                     on_timeout: Optional[str] = None, socket: Optional[str] = None,
                     base_url: Optional[str] = None, api_key: Optional[str] = None,
                     request_timeout: Optional[float] = None,
                     layers: Optional[Sequence[str]] = None, pull: Optional[str] = None,
                     registry_auth: Optional[Mapping[str, str]] = None,
                     on_idle: Optional[str] = None, lease: Any = None,
                     network: Optional[Mapping[str, Any]] = None,
                     cpu_max: Optional[float] = None,
                     display: Optional[Mapping[str, Any]] = None,
               processes: Optional[bool] = None) -> "AsyncSandbox":
        """Create a sandbox; arguments as :meth:`warren.Sandbox.create`."""
        cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key,
                                       request_timeout=request_timeout)
        body = create_body(image=image, tier=tier, cpu=cpu, memory_mb=memory_mb,
                           disk_mb=disk_mb, pids=pids, envs=envs, cwd=cwd, user=user,
                           metadata=metadata, labels=labels, timeout=timeout,
                           idle_timeout=idle_timeout, on_timeout=on_timeout,
                           layers=layers, pull=pull, registry_auth=registry_auth,
                           on_idle=on_idle, lease=lease, network=network,
                           cpu_max=cpu_max, display=display,
                           processes=processes)
        d = await AsyncHTTP(cfg).json("POST", "/sandboxes", json=body)
        info = SandboxInfo.from_json(d)
        return cls(info.sandbox_id, _config=cfg, _info=info)

    @classmethod
    async def connect(cls, sandbox_id: str, *, socket: Optional[str] = None,
                      base_url: Optional[str] = None, api_key: Optional[str] = None,
                      request_timeout: Optional[float] = None) -> "AsyncSandbox":
        sb = cls(sandbox_id, socket=socket, base_url=base_url, api_key=api_key,
                 request_timeout=request_timeout)
        await sb.get_info()
        return sb

    @classmethod
    async def list(cls, *, state: Optional[str] = None,
                   labels: Optional[Mapping[str, str]] = None,
                   metadata: Optional[Mapping[str, str]] = None,
                   page_size: Optional[int] = None, socket: Optional[str] = None,
                   base_url: Optional[str] = None, api_key: Optional[str] = None,
                   request_timeout: Optional[float] = None) -> List[SandboxInfo]:
        """Every matching sandbox (all pages); see :meth:`warren.Sandbox.list`."""
        return [s async for s in cls.list_iter(
            state=state, labels=labels, metadata=metadata, page_size=page_size, socket=socket,
            base_url=base_url, api_key=api_key, request_timeout=request_timeout)]

    @classmethod
    async def list_iter(cls, *, state: Optional[str] = None,
                        labels: Optional[Mapping[str, str]] = None,
                        metadata: Optional[Mapping[str, str]] = None,
                        page_size: Optional[int] = None, socket: Optional[str] = None,
                        base_url: Optional[str] = None, api_key: Optional[str] = None,
                        request_timeout: Optional[float] = None
                        ) -> AsyncIterator[SandboxInfo]:
        """Async iterator over matching sandboxes, one page at a time."""
        http = AsyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                  api_key=api_key,
                                                  request_timeout=request_timeout))
        token: Optional[str] = None
        while True:
            d = await http.json("GET", "/sandboxes", params=list_params(
                state, labels if labels is not None else metadata, page_size, token)) or {}
            for s in d.get("sandboxes", []):
                yield SandboxInfo.from_json(s)
            token = d.get("next_page_token")
            if not token:
                return

    @classmethod
    async def health(cls, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                     api_key: Optional[str] = None,
                     request_timeout: Optional[float] = None) -> Dict[str, Any]:
        return await AsyncHTTP(ConnectionConfig.resolve(
            socket=socket, base_url=base_url, api_key=api_key,
            request_timeout=request_timeout)).json("GET", "/health")

    async def get_info(self) -> SandboxInfo:
        self._info = SandboxInfo.from_json(
            await self._http.json("GET", f"/sandboxes/{seg(self._id)}"))
        return self._info

    async def is_running(self) -> bool:
        try:
            return (await self.get_info()).state == "running"
        except NotFoundError:
            return False

    async def kill(self) -> bool:
        """Kill the sandbox; False if it was not running any more or is unknown."""
        try:
            await self._http.request("DELETE", f"/sandboxes/{seg(self._id)}")
            return True
        except (ConflictError, NotFoundError):
            return False

    async def pause(self, *, keep_memory: Optional[bool] = None) -> SandboxInfo:
        """Freeze the sandbox; see :meth:`warren.Sandbox.pause`."""
        self._info = SandboxInfo.from_json(await self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/pause", json=pause_body(keep_memory)))
        return self._info

    async def snapshot(self, name: Optional[str] = None, *,
                       processes: bool = False) -> "ImageInfo":
        """The filesystem (and processes) as an image; see :meth:`warren.Sandbox.snapshot`."""
        from .images import ImageInfo
        body: Dict[str, Any] = {"name": name} if name is not None else {}
        if bool_value("processes", processes):
            body["processes"] = True
        return ImageInfo.from_json(await self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/snapshot", json=body))

    async def fork(self, count: int = 1, *, processes: bool = False,
                   **overrides: Any) -> List["AsyncSandbox"]:
        """New sandboxes from this one's filesystem (and processes); see :meth:`warren.Sandbox.fork`."""
        body = dict(drop_none(overrides), count=count)
        if bool_value("processes", processes):
            body["processes"] = True
        d = await self._http.json("POST", f"/sandboxes/{seg(self._id)}/fork", json=body)
        out = []
        for x in d["sandboxes"]:
            info = SandboxInfo.from_json(x)
            out.append(type(self)(info.sandbox_id, _config=self._http.cfg, _info=info))
        return out

    async def resume(self, timeout: Optional[int] = None) -> SandboxInfo:
        """Thaw the sandbox; see :meth:`warren.Sandbox.resume`."""
        body = {"timeout": timeout} if timeout is not None else None
        self._info = SandboxInfo.from_json(await self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/resume", json=body))
        return self._info

    async def is_paused(self) -> bool:
        try:
            return (await self.get_info()).state == "paused"
        except NotFoundError:
            return False

    async def set_timeout(self, timeout: int) -> SandboxInfo:
        self._info = SandboxInfo.from_json(await self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/timeout", json={"timeout": timeout}))
        return self._info

    async def events(self, since: Any = None, limit: Optional[int] = None, *,
                     denied: Optional[bool] = None, layer: Any = None,
                     last: Optional[int] = None, flagged: bool = False,
                     audit: bool = False) -> List[Any]:
        """As :meth:`Sandbox.events`: lifecycle events, or audit events with
        any audit argument."""
        if audit or denied is not None or layer is not None or last is not None or flagged:
            from .events import AsyncEvents
            return await AsyncEvents._with(self._http).query(
                sandbox=self._id, since=since, last=last or limit, denied=denied,
                layer=layer, flagged=flagged)
        url = f"/sandboxes/{seg(self._id)}/events"
        if limit is not None:
            d = await self._http.json("GET", url, params={"since": since, "limit": limit}) or {}
            return [Event.from_json(e) for e in d.get("events", [])]
        out: List[Event] = []
        cursor = since
        while True:
            d = await self._http.json("GET", url, params={"since": cursor, "limit": 100}) or {}
            page = [Event.from_json(e) for e in d.get("events", [])]
            out.extend(page)
            if len(page) < 100:
                return out
            cursor = page[-1].seq
