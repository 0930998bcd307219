"""Request bodies and response handling shared by the sync and async clients."""
from __future__ import annotations

import io
import os
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from .exceptions import WarrenError, error_from_dict
from .models import CommandResult

CHUNK = 1 << 20  # 1 MiB per upload chunk

Cmd = Union[str, Sequence[str]]


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def user_value(user: Union[int, str, None]) -> Optional[int]:
    """``user`` is a numeric uid; ``"root"`` is accepted as 0 for E2B habits."""
    if user is None:
        return None
    if isinstance(user, str):
        if user == "root":
            return 0
        if user.isdigit():
            return int(user)
        raise TypeError(f"user must be a numeric uid (got {user!r})")
    return user


def create_body(*, image: Optional[str], tier: Optional[str], cpu: Optional[float],
                memory_mb: Optional[int], disk_mb: Optional[int], pids: Optional[int],
                envs: Optional[Mapping[str, str]], cwd: Optional[str],
                user: Union[int, str, None], metadata: Optional[Mapping[str, str]],
                labels: Optional[Mapping[str, str]], timeout: Optional[int],
                idle_timeout: Optional[int], on_timeout: Optional[str],
                layers: Optional[Sequence[str]] = None, pull: Optional[str] = None,
                registry_auth: Optional[Mapping[str, str]] = None,
                on_idle: Optional[str] = None, lease: Any = None,
                network: Optional[Mapping[str, Any]] = None,
                cpu_max: Optional[float] = None,
                display: Optional[Mapping[str, Any]] = None,
                processes: Optional[bool] = None) -> Dict[str, Any]:
    if metadata is not None and labels is not None:
        raise TypeError("pass labels or metadata, not both (they are the same thing)")
    lab = labels if labels is not None else metadata
    if image is None:
        image = os.environ.get("WARREN_IMAGE") or None
    return drop_none({
        "tier": tier, "image": image, "cpu": cpu, "memory_mb": memory_mb,
        "disk_mb": disk_mb, "pids": pids,
        "env": dict(envs) if envs is not None else None,
        "workdir": cwd, "user": user_value(user),
        "labels": dict(lab) if lab is not None else None,
        "timeout": timeout, "idle_timeout": idle_timeout, "on_timeout": on_timeout,
        "layers": layers_value(layers), "pull": pull,
        "registry_auth": dict(registry_auth) if registry_auth is not None else None,
        "on_idle": on_idle,
        # a lease id, or a Lease / AsyncLease object
        "lease": getattr(lease, "lease_id", lease),
        "network": dict(network) if network is not None else None,
        "cpu_max": cpu_max,
        "display": display_value(display),
        "processes": bool_value("processes", processes),
    })


def bool_value(name: str, v: Optional[bool]) -> Optional[bool]:
    """A flag the daemon takes as a JSON boolean only: anything else is
    refused before any request."""
    if v is not None and not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool (got {v!r})")
    return v


def display_value(display: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The vm tier's display: ``{"vnc": True}`` asks for a VNC endpoint
    (never made otherwise). The daemon checks the shape; a bool here would
    be ambiguous, so it is refused before any request."""
    if display is None:
        return None
    if not isinstance(display, Mapping):
        raise TypeError(f'display must be a mapping like {{"vnc": True}} (got {display!r})')
    return dict(display)


def pause_body(keep_memory: Optional[bool]) -> Optional[Dict[str, Any]]:
    """``keep_memory=False``: the processes' state goes to disk and their
    memory is freed (containers: CRIU; microvm and vm: the VM's state, QEMU
    ends); resume restores it."""
    if keep_memory is None:
        return None
    if not isinstance(keep_memory, bool):
        raise TypeError(f"keep_memory must be a bool (got {keep_memory!r})")
    return {"keep_memory": keep_memory}


def layers_value(layers: Optional[Sequence[str]]) -> Optional[List[str]]:
    """Image references stacked on the image, base first."""
    if layers is None:
        return None
    if isinstance(layers, (str, bytes)):
        raise TypeError("layers must be a list of image references, not one string")
    out = list(layers)
    for x in out:
        if not isinstance(x, str):
            raise TypeError(f"layers: every entry must be a str (got {x!r})")
    return out


def list_params(state: Optional[str], labels: Optional[Mapping[str, str]],
                limit: Optional[int], page_token: Optional[str]) -> List[Tuple[str, Any]]:
    p: List[Tuple[str, Any]] = []
    if state is not None:
        p.append(("state", state))
    for k, v in (labels or {}).items():
        p.append(("label", f"{k}={v}"))
    if limit is not None:
        p.append(("limit", limit))
    if page_token:
        p.append(("page_token", page_token))
    return p


def text(data: Union[str, bytes, bytearray, memoryview, None], what: str) -> Optional[str]:
    if data is None or isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} must be UTF-8 text (the API carries it in JSON)") from e


def run_body(cmd: Cmd, *, envs: Optional[Mapping[str, str]], cwd: Optional[str],
             user: Union[int, str, None], stdin: Union[str, bytes, None],
             timeout: Optional[float], output_cap: Optional[int], background: bool,
             stream: bool) -> Dict[str, Any]:
    if isinstance(cmd, (bytes, bytearray)):
        cmd = cmd.decode("utf-8")
    body = drop_none({
        "cmd": cmd if isinstance(cmd, str) else [str(a) for a in cmd],
        "env": dict(envs) if envs is not None else None,
        "cwd": cwd, "user": user_value(user), "stdin": text(stdin, "stdin"),
        "timeout": timeout, "output_cap": output_cap,
    })
    if background:
        body["background"] = True
    if stream:
        body["stream"] = True
    return body


def mode_str(mode: Union[int, str, None]) -> Optional[str]:
    if mode is None or isinstance(mode, str):
        return mode
    return "%04o" % mode


class StreamState:
    """Accumulates an NDJSON command stream: output chunks, then the exit line."""

    def __init__(self) -> None:
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.exit: Optional[Dict[str, Any]] = None

    def handle(self, obj: Any) -> Optional[Tuple[str, str]]:
        """Return ``("stdout"|"stderr", data)`` for an output line, ``None`` otherwise."""
        if not isinstance(obj, dict):
            return None
        t = obj.get("type")
        if t in ("stdout", "stderr"):
            data = obj.get("data") or ""
            (self.stdout if t == "stdout" else self.stderr).append(data)
            return t, data
        if t == "exit":
            self.exit = obj
            return None
        if t == "error" or isinstance(obj.get("error"), dict):
            err = obj.get("error") if isinstance(obj.get("error"), dict) else obj
            raise error_from_dict(err)
        return None  # unknown line types are ignored (forward compatibility)

    def result(self, cmd_id: Optional[str] = None) -> CommandResult:
        if self.exit is None:
            raise WarrenError("the output stream ended without an exit line",
                              code="bad_response")
        r = CommandResult.from_json(self.exit, stdout="".join(self.stdout),
                                    stderr="".join(self.stderr))
        if cmd_id and r.id is None:
            r.id = cmd_id
        return r


def is_running_state(d: Any) -> bool:
    return isinstance(d, dict) and d.get("state") == "running"


# --- request bodies for files.write --------------------------------------

def _file_size(f: Any) -> Optional[int]:
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def _iter_file(f: Any) -> Iterable[bytes]:
    while True:
        b = f.read(CHUNK)
        if not b:
            return
        yield b.encode("utf-8") if isinstance(b, str) else bytes(b)


def sync_write_content(data: Any) -> Tuple[Any, Dict[str, str], Optional[Callable[[], None]]]:
    """Normalise ``files.write`` data to (httpx content, headers, closer)."""
    headers = {"Content-Type": "application/octet-stream"}
    if isinstance(data, str):
        return data.encode("utf-8"), headers, None
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), headers, None
    if isinstance(data, os.PathLike):
        f = open(data, "rb")
        headers["Content-Length"] = str(os.fstat(f.fileno()).st_size)
        return _iter_file(f), headers, f.close
    if hasattr(data, "read"):
        size = _file_size(data)
        if size is not None:
            # text-mode files may encode to a different length: stream them chunked
            if not isinstance(data, io.TextIOBase):
                headers["Content-Length"] = str(size)
        return _iter_file(data), headers, None
    if hasattr(data, "__iter__"):
        return (bytes(c) if not isinstance(c, str) else c.encode() for c in data), headers, None
    raise TypeError(f"cannot write {type(data).__name__}: pass str, bytes, a file object "
                    "opened in binary mode, an os.PathLike or an iterable of bytes")


def async_write_content(data: Any) -> Tuple[Any, Dict[str, str], Optional[Callable[[], None]]]:
    """Like :func:`sync_write_content`, producing content an AsyncClient accepts."""
    headers = {"Content-Type": "application/octet-stream"}
    if isinstance(data, str):
        return data.encode("utf-8"), headers, None
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), headers, None
    if hasattr(data, "__aiter__"):
        async def agen_a() -> Any:
            async for c in data:
                yield c.encode() if isinstance(c, str) else bytes(c)
        return agen_a(), headers, None
    content, headers, closer = sync_write_content(data)

    async def agen() -> Any:
        for c in content:
            yield c
    return agen(), headers, closer
