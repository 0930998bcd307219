"""The synchronous client: :class:`Sandbox`, its ``commands`` and ``files``."""
from __future__ import annotations

import os
import time
from typing import (IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from ._common import (Cmd, StreamState, bool_value, create_body, drop_none, is_running_state,
                      list_params, mode_str, pause_body, run_body, sync_write_content,
                      text)
from ._http import ConnectionConfig, SyncHTTP, seg
from ._ndjson import NDJSONDecoder
from ._tar import IterReader, build_tar, iter_file, safe_extract
from .exceptions import (CommandExitError, ConflictError, NotFoundError, RequestTimeoutError)
from .models import (CommandInfo, CommandResult, EntryInfo, Event, SandboxInfo, UploadResult)
from .network import Network
from .ports import Ports
from .pty import Pty
from .screen import Input, screenshot

__all__ = ["Sandbox", "Commands", "CommandHandle", "Files", "ByteStream"]

OutputCallback = Callable[[str], Any]
WAIT_POLL = 30  # seconds per long-poll of /wait


def _cmd_timeout(timeout: Optional[float], request_timeout: Optional[float]) -> Optional[float]:
    """HTTP read timeout for a call that lasts as long as a command."""
    if request_timeout is not None:
        return request_timeout
    return None if timeout is None else float(timeout) + 30.0


class CommandHandle:
    """A command started with ``background=True`` (or found by ``commands.connect``).

    Iterating over the handle yields ``(stdout, stderr)`` pairs, exactly one of
    them a string, from the start of the command's output; when iteration ends
    the result is available from :meth:`wait` without another request.
    """

    def __init__(self, sandbox: "Sandbox", cmd_id: str, pid: Optional[int] = None,
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
        """The result once known (after :meth:`wait` or a full iteration)."""
        return self._result

    def __repr__(self) -> str:
        return f"CommandHandle(sandbox_id={self.sandbox_id!r}, id={self.id!r}, pid={self.pid!r})"

    def __iter__(self) -> Iterator[Tuple[Optional[str], Optional[str]]]:
        st = StreamState()
        dec = NDJSONDecoder()
        http = self._sb._http
        with http.stream("GET", self._path + "/stream", timeout=None) as resp:
            for chunk in http.iter_bytes(resp):
                for obj in dec.feed(chunk):
                    out = st.handle(obj)
                    if out:
                        yield (out[1], None) if out[0] == "stdout" else (None, out[1])
            for obj in dec.close():
                out = st.handle(obj)
                if out:
                    yield (out[1], None) if out[0] == "stdout" else (None, out[1])
        self._result = st.result(self.id)

    def get_info(self) -> CommandInfo:
        """The command's current state (``GET .../commands/{id}``)."""
        return CommandInfo.from_json(self._sb._http.json("GET", self._path))

    def wait(self, timeout: Optional[float] = None, *, check: bool = False,
             on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> CommandResult:
        """Block until the command ends and return its result.

        With ``on_stdout``/``on_stderr`` (here or given to ``run``), the output
        stream is followed and the callbacks get every chunk, from the start.
        ``timeout`` (seconds) bounds the wait: :class:`RequestTimeoutError` when
        it passes (the command keeps running). ``check=True`` raises
        :class:`CommandExitError` unless the command exited with status 0.
        """
        if self._result is None:
            on_out = on_stdout or self._on_stdout
            on_err = on_stderr or self._on_stderr
            if on_out or on_err:
                self._result = self._follow(on_out, on_err, timeout)
            else:
                self._result = self._poll(timeout)
        if check and not self._result.ok:
            raise CommandExitError(self._result)
        return self._result

    def _follow(self, on_out: Optional[OutputCallback], on_err: Optional[OutputCallback],
                timeout: Optional[float]) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        st = StreamState()
        dec = NDJSONDecoder()
        http = self._sb._http
        with http.stream("GET", self._path + "/stream", timeout=timeout) as resp:
            for chunk in http.iter_bytes(resp):
                for obj in dec.feed(chunk):
                    _dispatch(st, obj, on_out, on_err)
                if deadline is not None and time.monotonic() > deadline and st.exit is None:
                    raise RequestTimeoutError(f"command {self.id} still running after {timeout}s")
            for obj in dec.close():
                _dispatch(st, obj, on_out, on_err)
        return st.result(self.id)

    def _poll(self, timeout: Optional[float]) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            poll = WAIT_POLL
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimeoutError(f"command {self.id} still running after {timeout}s")
                poll = max(1, min(WAIT_POLL, int(left + 0.999)))
            d = self._sb._http.json("GET", self._path + "/wait", params={"timeout": poll},
                                    timeout=poll + 30)
            if not is_running_state(d):
                r = CommandResult.from_json(d)
                if r.id is None:
                    r.id = self.id
                return r

    def kill(self) -> bool:
        """Kill the command's whole process tree. False if it was already gone."""
        try:
            self._sb._http.request("DELETE", self._path)
            return True
        except (NotFoundError, ConflictError):
            return False

    def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> None:
        """Write ``data`` (UTF-8 text) to the command's stdin; ``eof=True`` closes it after."""
        self._sb._http.request("POST", self._path + "/stdin",
                               json={"data": text(data, "stdin") or "", "eof": bool(eof)})

    def close_stdin(self) -> None:
        """Close the command's stdin (it then reads EOF)."""
        self.send_stdin("", eof=True)


def _dispatch(st: StreamState, obj: Any, on_out: Optional[OutputCallback],
              on_err: Optional[OutputCallback]) -> None:
    out = st.handle(obj)
    if out is None:
        return
    kind, data = out
    if kind == "stdout" and on_out:
        on_out(data)
    elif kind == "stderr" and on_err:
        on_err(data)


class Commands:
    """``sandbox.commands``: run and manage processes inside the sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/sandboxes/{seg(self._sb.sandbox_id)}/commands"

    def run(self, cmd: Cmd, background: bool = False, envs: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, user: Union[int, str, None] = None,
            on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None,
            stdin: Union[str, bytes, None] = None, timeout: Optional[float] = None, *,
            check: bool = False, output_cap: Optional[int] = None,
            request_timeout: Optional[float] = None) -> Any:
        """Run a command and return its :class:`CommandResult` (or a
        :class:`CommandHandle` with ``background=True``).

        Args:
            cmd: a string (run with ``sh -c``) or an argv list.
            background: return at once with a handle; the command keeps running.
            envs, cwd, user: environment additions, working directory, numeric uid.
            on_stdout, on_stderr: called with each chunk of output as it
                happens (the NDJSON stream is used); the result still carries
                the whole output. With ``background=True`` they are called
                while :meth:`CommandHandle.wait` runs.
            stdin: text given on the command's stdin (then EOF).
            timeout: seconds (fractions allowed) before the command's process
                tree is killed (``reason == "timeout"``); default: none, the
                sandbox's lifetime bounds it.
            check: raise :class:`CommandExitError` unless the exit code is 0.
                By default a non-zero exit is *not* an exception.
            output_cap: bytes of stdout/stderr kept (the daemon's default otherwise).
            request_timeout: HTTP read timeout for this call (default: none
                without ``timeout``, else ``timeout + 30`` s).
        """
        streaming = not background and (on_stdout is not None or on_stderr is not None)
        body = run_body(cmd, envs=envs, cwd=cwd, user=user, stdin=stdin, timeout=timeout,
                        output_cap=output_cap, background=background, stream=streaming)
        http = self._sb._http
        if background:
            d = http.json("POST", self._path, json=body)
            return CommandHandle(self._sb, str(d["id"]), d.get("pid"), on_stdout, on_stderr)
        rt = _cmd_timeout(timeout, request_timeout)
        if streaming:
            st = StreamState()
            dec = NDJSONDecoder()
            with http.stream("POST", self._path, json=body, timeout=rt) as resp:
                for chunk in http.iter_bytes(resp):
                    for obj in dec.feed(chunk):
                        _dispatch(st, obj, on_stdout, on_stderr)
                for obj in dec.close():
                    _dispatch(st, obj, on_stdout, on_stderr)
            result = st.result()
        else:
            result = CommandResult.from_json(http.json("POST", self._path, json=body,
                                                       timeout=rt))
        if check and not result.ok:
            raise CommandExitError(result)
        return result

    def list(self) -> List[CommandInfo]:
        """Every command the sandbox has run or is running."""
        d = self._sb._http.json("GET", self._path)
        return [CommandInfo.from_json(c) for c in (d or {}).get("commands", [])]

    def kill(self, cmd_id: str) -> bool:
        """Kill a command's process tree. False if no such running command."""
        return CommandHandle(self._sb, cmd_id).kill()

    def connect(self, cmd_id: str, on_stdout: Optional[OutputCallback] = None,
                on_stderr: Optional[OutputCallback] = None) -> CommandHandle:
        """A handle on an existing command (raises :class:`NotFoundError` if none)."""
        h = CommandHandle(self._sb, cmd_id, None, on_stdout, on_stderr)
        info = h.get_info()
        h.pid = info.pid
        return h

    def send_stdin(self, cmd_id: str, data: Union[str, bytes], eof: bool = False) -> None:
        """Write to the stdin of a background command."""
        CommandHandle(self._sb, cmd_id).send_stdin(data, eof)


class ByteStream:
    """An iterator of byte chunks of a download; close it (or use ``with``) if
    you stop before the end, so its connection returns to the pool."""

    def __init__(self, chunks: Iterator[bytes], closer: Callable[[], Any]) -> None:
        self._chunks = chunks
        self._closer: Optional[Callable[[], Any]] = closer

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunks
        finally:
            self.close()

    def close(self) -> None:
        closer, self._closer = self._closer, None
        if closer is not None:
            closer()

    def __enter__(self) -> "ByteStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Files:
    """``sandbox.files``: the sandbox's filesystem. Paths are absolute inside it."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/sandboxes/{seg(self._sb.sandbox_id)}/files"

    def read(self, path: str, format: str = "text",
             request_timeout: Optional[float] = None) -> Any:
        """Read a file: ``format="text"`` (str, UTF-8), ``"bytes"`` or ``"stream"``
        (a :class:`ByteStream` of chunks; iterate it to the end or ``close()`` it).
        :class:`NotFoundError` if the file is missing."""
        http = self._sb._http
        if format == "stream":
            return self._stream(path, request_timeout)
        if format not in ("text", "bytes"):
            raise ValueError('format must be "text", "bytes" or "stream"')
        rt = "default" if request_timeout is None else request_timeout
        data = http.request("GET", self._path, params={"path": path}, timeout=rt).content
        return data if format == "bytes" else data.decode("utf-8")

    def _stream(self, path: str, request_timeout: Optional[float]) -> "ByteStream":
        http = self._sb._http
        rt = "default" if request_timeout is None else request_timeout
        cm = http.stream("GET", self._path, params={"path": path}, timeout=rt)
        resp = cm.__enter__()  # errors (404, 400) surface here, not at the first chunk
        return ByteStream(http.iter_bytes(resp), lambda: cm.__exit__(None, None, None))

    def write(self, path: str, data: Union[str, bytes, IO[bytes], "os.PathLike[str]",
                                           Iterable[bytes]], *,
              mode: Union[int, str, None] = None, parents: bool = True,
              request_timeout: Optional[float] = None) -> EntryInfo:
        """Write (atomically replace) a file and return its entry.

        ``data`` may be ``str`` (UTF-8), ``bytes``, a binary file object or an
        ``os.PathLike`` naming a local file (both streamed with their
        length), or any iterable of ``bytes`` (streamed chunked). Missing
        parent directories are created unless ``parents=False``.
        """
        content, headers, closer = sync_write_content(data)
        rt = "default" if request_timeout is None else request_timeout
        try:
            d = self._sb._http.json("PUT", self._path, content=content, headers=headers,
                                    params={"path": path, "mode": mode_str(mode),
                                            "parents": parents}, timeout=rt)
        finally:
            if closer:
                closer()
        return EntryInfo.from_json(d or {"path": path})

    def write_files(self, files: Iterable[Any]) -> List[EntryInfo]:
        """Write several files: items are ``{"path": ..., "data": ...}`` dicts
        or ``(path, data)`` pairs."""
        out = []
        for f in files:
            p, data = (f["path"], f["data"]) if isinstance(f, Mapping) else f
            out.append(self.write(p, data))
        return out

    def list(self, path: str, depth: int = 1) -> List[EntryInfo]:
        """Entries below ``path`` down to ``depth`` levels (1..16)."""
        d = self._sb._http.json("GET", self._path + "/list",
                                params={"path": path, "depth": depth})
        return [EntryInfo.from_json(e) for e in (d or {}).get("entries", [])]

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists in the sandbox."""
        d = self._sb._http.json("GET", self._path + "/exists", params={"path": path})
        return bool((d or {}).get("exists"))

    def get_info(self, path: str) -> EntryInfo:
        """Stat ``path`` (symlinks are not followed). :class:`NotFoundError` if missing."""
        return EntryInfo.from_json(self._sb._http.json("GET", self._path + "/stat",
                                                       params={"path": path}))

    def remove(self, path: str, recursive: bool = True) -> None:
        """Remove a file or a directory (with its contents unless ``recursive=False``)."""
        self._sb._http.request("DELETE", self._path,
                               params={"path": path, "recursive": recursive})

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Rename/move ``old_path`` to ``new_path``; returns the new entry."""
        return EntryInfo.from_json(self._sb._http.json(
            "POST", self._path + "/rename", json={"from": old_path, "to": new_path}))

    def make_dir(self, path: str, parents: bool = True,
                 mode: Union[int, str, None] = None) -> bool:
        """Create a directory. True if created, False if it already existed."""
        # parents=false first: an existing directory is then a conflict (mkdir -p
        # would succeed silently); retry with parents only if one is missing.
        for with_parents in (False, True):
            try:
                self._sb._http.json("POST", self._path + "/mkdir", json=drop_none({
                    "path": path, "parents": with_parents, "mode": mode_str(mode)}))
                return True
            except ConflictError:
                return False
            except NotFoundError:
                if not parents or with_parents:
                    raise
        return False  # not reached

    def upload_dir(self, local_dir: Union[str, "os.PathLike[str]"], remote_dir: str,
                   request_timeout: Optional[float] = None) -> UploadResult:
        """Copy the contents of a local directory into ``remote_dir`` (created if
        missing) with one tar upload. Only regular files, directories and
        symlinks are sent."""
        f, size, _ = build_tar(os.fspath(local_dir))
        with f:
            self.make_dir(remote_dir)
            rt = "default" if request_timeout is None else request_timeout
            d = self._sb._http.json(
                "PUT", self._path + "/tar", params={"path": remote_dir},
                content=iter_file(f), timeout=rt,
                headers={"Content-Type": "application/x-tar", "Content-Length": str(size)})
        return UploadResult.from_json(d or {})

    def download_dir(self, remote_dir: str, local_dir: Union[str, "os.PathLike[str]"],
                     request_timeout: Optional[float] = None) -> int:
        """Copy the tree below ``remote_dir`` into ``local_dir`` (created if
        missing); returns the number of entries written. Extraction refuses
        absolute names, ``..`` and writes through symlinks."""
        http = self._sb._http
        rt = "default" if request_timeout is None else request_timeout
        with http.stream("GET", self._path + "/tar", params={"path": remote_dir},
                         timeout=rt) as resp:
            return safe_extract(IterReader(http.iter_bytes(resp)), os.fspath(local_dir))


class Sandbox:
    """A warren sandbox, driven synchronously.

    Make one with :meth:`create` (or :meth:`connect` to an existing id). Use it
    as a context manager to kill it on exit::

        with Sandbox.create(image="busybox") as sb:
            print(sb.commands.run("echo hi").stdout)

    Connection arguments accepted by every constructor: ``socket`` (Unix
    socket path), ``base_url`` (TCP, e.g. ``"http://10.0.0.5:7070"``),
    ``api_key`` (bearer token) and ``request_timeout`` (seconds, default 60);
    the defaults come from ``WARREN_SOCKET``/``WARREN_URL``/``WARREN_API_KEY``.
    """

    def __init__(self, sandbox_id: str, *, socket: Optional[str] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None,
                 _config: Optional[ConnectionConfig] = None,
                 _info: Optional[SandboxInfo] = None) -> None:
        cfg = _config or ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                  api_key=api_key,
                                                  request_timeout=request_timeout)
        self._http = SyncHTTP(cfg)
        self._id = sandbox_id
        self._info = _info
        self.commands = Commands(self)
        self.files = Files(self)
        self.pty = Pty(self)
        self.network = Network(self)
        self.ports = Ports(self)
        self.input = Input(self)

    @property
    def sandbox_id(self) -> str:
        """The sandbox id (16 hex characters)."""
        return self._id

    id = sandbox_id

    @property
    def info(self) -> Optional[SandboxInfo]:
        """The last :class:`SandboxInfo` fetched (from create/connect/get_info)."""
        return self._info

    def __repr__(self) -> str:
        return f"Sandbox(sandbox_id={self._id!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.kill()
        else:
            try:
                self.kill()
            except Exception:
                pass  # do not mask the exception that ended the block

    @classmethod
    def create(cls, image: Optional[str] = None, *, tier: Optional[str] = "container",
               cpu: Optional[float] = None, memory_mb: Optional[int] = None,
               disk_mb: Optional[int] = None, pids: Optional[int] = None,
               envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
               user: Union[int, str, None] = None,
               metadata: Optional[Mapping[str, str]] = None,
               labels: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None,
               idle_timeout: Optional[int] = None, on_timeout: Optional[str] = None,
               socket: Optional[str] = None, base_url: Optional[str] = None,
               api_key: Optional[str] = None,
               request_timeout: Optional[float] = None,
               layers: Optional[Sequence[str]] = None, pull: Optional[str] = None,
               registry_auth: Optional[Mapping[str, str]] = None,
               on_idle: Optional[str] = None, lease: Any = None,
               network: Optional[Mapping[str, Any]] = None,
               cpu_max: Optional[float] = None,
               display: Optional[Mapping[str, Any]] = None,
               processes: Optional[bool] = None) -> "Sandbox":
        """Create a sandbox and return it once it is running.

        Args:
            image: a store image (``name:tag``, a digest), a registry reference
                (``host[:port]/repo[:tag|@sha256:...]``, pulled into the node's
                store when missing, lazily where it can), an image name the
                daemon's config knows, or an absolute path to a rootfs directory
                or EROFS file on the node (default: ``$WARREN_IMAGE``).
            layers: image references stacked on ``image`` as overlay lowers,
                base first (1 to 16).
            pull: for registry references: ``"missing"`` (default),
                ``"always"`` or ``"never"``.
            registry_auth: ``{"username": ..., "password": ...}`` or
                ``{"token": ...}`` for the registry; sent with this request only.
            tier: isolation tier (``"container"``).
            cpu: CPU request in cores (0 < cpu <= 64): the sandbox's share under
                contention, and also its cap unless ``cpu_max`` is given.
            cpu_max: CPU cap in cores (container tier; at least ``cpu``, at most
                64): an active sandbox bursts above ``cpu`` up to it.
            memory_mb, disk_mb, pids: limits.
            envs: environment of every command; cwd: default working directory;
            user: default numeric uid.
            labels (alias ``metadata``): up to 64 string pairs, filterable in :meth:`list`.
            timeout: seconds of total lifetime (default 300), then killed.
            idle_timeout: seconds without API activity or CPU use (0 = off), then
                ``on_idle`` applies: ``"pause"`` (default) or ``"kill"``.
            on_timeout: at the end of the lifetime: ``"kill"`` (default) or
                ``"pause"`` (a later resume gives it a fresh lifetime).
            lease: a lease id or :class:`warren.Lease`: the sandbox is paused
                when the lease's heartbeats stop and resumed when they come back.
            network: the network policy (docs/API.md, "Network"), e.g.
                ``{"mode": "allowlist", "allow": [{"cidr": "10.0.0.0/8",
                "ports": "443", "protocol": "tcp"}], "services": ["pypi"]}``;
                default mode ``"none"`` (loopback only). See :attr:`network`.
            processes: for a snapshot taken with ``processes=True``: restore
                its processes (the default) or, with ``False``, its files only.
            display: the vm tier's screen: ``{"vnc": True}`` gives the VM a
                VNC endpoint (never made unless asked for); its Unix socket
                and password are in ``get_info().display["vnc"]``.
        Raises:
            InvalidArgumentError: a value is out of range (``.field`` names it).
            ResourceExhaustedError: the node is full.
        """
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
        d = SyncHTTP(cfg).json("POST", "/sandboxes", json=body)
        info = SandboxInfo.from_json(d)
        return cls(info.sandbox_id, _config=cfg, _info=info)

    @classmethod
    def connect(cls, sandbox_id: str, *, socket: Optional[str] = None,
                base_url: Optional[str] = None, api_key: Optional[str] = None,
                request_timeout: Optional[float] = None) -> "Sandbox":
        """Attach to an existing sandbox of this tenant.

        Raises :class:`NotFoundError` for an unknown id or another tenant's sandbox.
        """
        sb = cls(sandbox_id, socket=socket, base_url=base_url, api_key=api_key,
                 request_timeout=request_timeout)
        sb.get_info()
        return sb

    @classmethod
    def list(cls, *, state: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
             metadata: Optional[Mapping[str, str]] = None, page_size: Optional[int] = None,
             socket: Optional[str] = None, base_url: Optional[str] = None,
             api_key: Optional[str] = None,
             request_timeout: Optional[float] = None) -> List[SandboxInfo]:
        """Every sandbox of this tenant matching ``state`` (e.g. ``"running"``,
        ``"killed"``) and all ``labels``, in creation order; follows every page.
        See :meth:`list_iter` to stream the pages lazily."""
        return list(cls.list_iter(state=state, labels=labels, metadata=metadata,
                                  page_size=page_size, socket=socket, base_url=base_url,
                                  api_key=api_key, request_timeout=request_timeout))

    @classmethod
    def list_iter(cls, *, state: Optional[str] = None,
                  labels: Optional[Mapping[str, str]] = None,
                  metadata: Optional[Mapping[str, str]] = None,
                  page_size: Optional[int] = None, socket: Optional[str] = None,
                  base_url: Optional[str] = None, api_key: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> Iterator[SandboxInfo]:
        """Like :meth:`list`, fetching one page (``page_size``, 1..1000) at a time."""
        http = SyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                 api_key=api_key,
                                                 request_timeout=request_timeout))
        token: Optional[str] = None
        while True:
            d = http.json("GET", "/sandboxes",
                          params=list_params(state, labels if labels is not None else metadata,
                                             page_size, token)) or {}
            for s in d.get("sandboxes", []):
                yield SandboxInfo.from_json(s)
            token = d.get("next_page_token")
            if not token:
                return

    @classmethod
    def health(cls, *, socket: Optional[str] = None, base_url: Optional[str] = None,
               api_key: Optional[str] = None,
               request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """The daemon's ``/v1/health``: ``{"status": "ok", "version", "sandboxes"}``."""
        return SyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                 api_key=api_key,
                                                 request_timeout=request_timeout)
                        ).json("GET", "/health")

    def get_info(self) -> SandboxInfo:
        """Fetch the sandbox's current :class:`SandboxInfo`."""
        self._info = SandboxInfo.from_json(self._http.json("GET", f"/sandboxes/{seg(self._id)}"))
        return self._info

    def is_running(self) -> bool:
        """True while the sandbox is running (False once killed, timed out,
        failed or unknown)."""
        try:
            return self.get_info().state == "running"
        except NotFoundError:
            return False

    def kill(self) -> bool:
        """Kill every process and release every resource.

        Returns False (instead of raising) when the sandbox was not running
        any more or is unknown.
        """
        try:
            self._http.request("DELETE", f"/sandboxes/{seg(self._id)}")
            return True
        except (ConflictError, NotFoundError):
            return False

    def screenshot(self) -> bytes:
        """The screen of a VM sandbox (tier ``"vm"``) as PNG bytes."""
        return screenshot(self)

    def pause(self, *, keep_memory: Optional[bool] = None) -> SandboxInfo:
        """Freeze every process of the sandbox (memory and files kept; its
        lifetime stops counting). Any call that needs it running (commands,
        files, pty) resumes it, so :meth:`resume` is optional.

        ``keep_memory=False``: the state goes to disk and the memory is
        freed; resume restores it. Containers: the processes are
        checkpointed with CRIU (refused with :class:`ConflictError` while a
        command runs or a TCP connection is established; where the node has
        no working CRIU, :class:`InvalidArgumentError` naming
        ``keep_memory``). microvm and vm: the VM's whole state (memory,
        devices, disk) goes to a file on the node and its QEMU ends."""
        self._info = SandboxInfo.from_json(self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/pause", json=pause_body(keep_memory)))
        return self._info

    def resume(self, timeout: Optional[int] = None) -> SandboxInfo:
        """Thaw a paused sandbox (a running one: nothing happens). With
        ``timeout``, its lifetime becomes ``timeout`` seconds from now;
        otherwise it has what it had left when paused."""
        body = {"timeout": timeout} if timeout is not None else None
        self._info = SandboxInfo.from_json(self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/resume", json=body))
        return self._info

    def snapshot(self, name: Optional[str] = None, *,
                 processes: bool = False) -> "ImageInfo":
        """Capture the sandbox's filesystem changes as image ``name``
        (``"name[:tag]"``; default ``snapshot/<id>:<ms>``) in the node's
        store, stacked on the image it came from. ``Sandbox.create(name)``
        starts from it; ``warren.images.push`` sends it to a registry. A
        running sandbox is frozen during the capture, a paused one stays so.

        ``processes=True`` (container tier, with CRIU): its running processes
        too (a REPL, a server, their memory), saved while frozen with the
        files; a sandbox created from the snapshot goes on from there
        (:attr:`ImageInfo.processes` names the image that holds them; a push
        takes them along). VM snapshots always hold the whole VM."""
        from .images import ImageInfo
        body: Dict[str, Any] = {"name": name} if name is not None else {}
        if bool_value("processes", processes):
            body["processes"] = True
        return ImageInfo.from_json(self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/snapshot", json=body))

    def fork(self, count: int = 1, *, processes: bool = False,
             **overrides: Any) -> List["Sandbox"]:
        """``count`` new sandboxes from this one's current filesystem (a
        snapshot, then creates with this sandbox's settings; ``overrides``
        are create fields that differ, e.g. ``memory_mb=256``).
        ``processes=True``: with its running processes too (see
        :meth:`snapshot`); each fork's go on independently."""
        body = dict(drop_none(overrides), count=count)
        if bool_value("processes", processes):
            body["processes"] = True
        d = self._http.json("POST", f"/sandboxes/{seg(self._id)}/fork", json=body)
        out = []
        for x in d["sandboxes"]:
            info = SandboxInfo.from_json(x)
            out.append(Sandbox(info.sandbox_id, _config=self._http.cfg, _info=info))
        return out

    def is_paused(self) -> bool:
        """True while the sandbox is paused."""
        try:
            return self.get_info().state == "paused"
        except NotFoundError:
            return False

    def set_timeout(self, timeout: int) -> SandboxInfo:
        """Make the sandbox expire ``timeout`` seconds from now (extend or shorten)."""
        self._info = SandboxInfo.from_json(self._http.json(
            "POST", f"/sandboxes/{seg(self._id)}/timeout", json={"timeout": timeout}))
        return self._info

    def events(self, since: Any = None, limit: Optional[int] = None, *,
               denied: Optional[bool] = None, layer: Any = None, last: Optional[int] = None,
               flagged: bool = False, audit: bool = False) -> List[Any]:
        """The sandbox's lifecycle events after sequence number ``since``, or
        its audit events (:class:`warren.events.AuditEvent`: what the node
        refused or limited) when any of ``denied``, ``layer``, ``last``,
        ``flagged`` or ``audit=True`` is given; ``since`` is then a time
        (RFC 3339, a datetime, or "10m" ago).

        Lifecycle events: with ``limit`` one page of at most ``limit``
        events; without it, every event (pages are followed).
        """
        if audit or denied is not None or layer is not None or last is not None or flagged:
            from .events import Events
            return Events._with(self._http).query(
                sandbox=self._id, since=since, last=last or limit, denied=denied,
                layer=layer, flagged=flagged)
        url = f"/sandboxes/{seg(self._id)}/events"
        if limit is not None:
            d = self._http.json("GET", url, params={"since": since, "limit": limit}) or {}
            return [Event.from_json(e) for e in d.get("events", [])]
        out: List[Event] = []
        cursor = since
        while True:
            d = self._http.json("GET", url, params={"since": cursor, "limit": 100}) or {}
            page = [Event.from_json(e) for e in d.get("events", [])]
            out.extend(page)
            if len(page) < 100:
                return out
            cursor = page[-1].seq
