"""Plain data objects returned by the SDK.

Every object keeps the decoded JSON it was built from in ``raw`` so fields
added to the API later are reachable before the SDK knows them.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Union

__all__ = [
    "SandboxInfo",
    "CommandResult",
    "CommandInfo",
    "EntryInfo",
    "FileType",
    "Event",
    "UploadResult",
]


def _dt(value: Any) -> Optional[datetime]:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class SandboxInfo:
    """A sandbox as the daemon describes it (``GET /v1/sandboxes/{id}``).

    ``state`` is one of ``creating``, ``running``, ``killed``, ``timed_out``,
    ``failed``. ``labels`` is also available as ``metadata`` (E2B's name).
    """
    sandbox_id: str
    state: str
    image: Optional[str] = None
    tier: Optional[str] = None
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    cpu: Optional[float] = None
    #: CPU cap in cores when it differs from ``cpu`` (container tier)
    cpu_max: Optional[float] = None
    memory_mb: Optional[int] = None
    disk_mb: Optional[int] = None
    pids: Optional[int] = None
    user: Optional[int] = None
    workdir: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    idle_timeout: Optional[int] = None
    on_timeout: Optional[str] = None
    on_idle: Optional[str] = None
    lease: Optional[str] = None
    #: paused: why (``request``, ``idle``, ``lease``, ``timeout``), since
    #: when, and the seconds of lifetime left (the clock stops while paused)
    pause_reason: Optional[str] = None
    paused_at: Optional[datetime] = None
    timeout_remaining: Optional[float] = None
    #: a live sandbox's use: cpu_s, memory_bytes, memory_peak_bytes, pids
    usage: Optional[Dict[str, Any]] = None
    #: the vm tier's display when asked for at create: ``{"vnc": {"socket":
    #: path on the node, "password": ...}}`` (absent while the VM's state
    #: is on disk)
    display: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> str:
        return self.sandbox_id

    @property
    def metadata(self) -> Dict[str, str]:
        return self.labels

    @property
    def is_running(self) -> bool:
        return self.state == "running"

    @property
    def is_paused(self) -> bool:
        return self.state == "paused"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            sandbox_id=str(d.get("id", "")),
            state=str(d.get("state", "")),
            image=d.get("image"),
            tier=d.get("tier"),
            created_at=_dt(d.get("created_at")),
            expires_at=_dt(d.get("expires_at")),
            cpu=d.get("cpu"),
            cpu_max=d.get("cpu_max"),
            memory_mb=d.get("memory_mb"),
            disk_mb=d.get("disk_mb"),
            pids=d.get("pids"),
            user=d.get("user"),
            workdir=d.get("workdir"),
            labels=dict(d.get("labels") or {}),
            idle_timeout=d.get("idle_timeout"),
            on_timeout=d.get("on_timeout"),
            on_idle=d.get("on_idle"),
            lease=d.get("lease"),
            pause_reason=d.get("pause_reason"),
            paused_at=_dt(d.get("paused_at")),
            timeout_remaining=d.get("timeout_remaining"),
            usage=d.get("usage"),
            display=d.get("display"),
            raw=d,
        )


@dataclass
class CommandResult:
    """The outcome of a finished command.

    ``reason`` is one of ``exited``, ``signaled``, ``timeout``, ``oom``,
    ``killed``, ``start_failed`` (or ``error`` when the daemon could not run
    it; ``error`` then holds its message). ``exit_code`` is ``None`` when the
    daemon reports none. A non-zero ``exit_code`` is *not* an exception unless
    ``check=True`` was passed (see :class:`CommandExitError`).
    """
    exit_code: Optional[int]
    stdout: str = ""
    stderr: str = ""
    reason: str = "exited"
    signal: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[float] = None
    cpu_ms: Optional[float] = None
    memory_peak_bytes: Optional[int] = None
    id: Optional[str] = None
    error_message: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def error(self) -> Optional[str]:
        """``None`` when the command exited on its own; otherwise the daemon's
        error message when it gave one, else the ``reason`` (``"timeout"``,
        ``"oom"``, ``"signaled"``, ...)."""
        if self.reason == "exited" and not self.error_message:
            return None
        return self.error_message or self.reason

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.reason == "exited" and self.exit_code == 0

    @property
    def duration(self) -> Optional[float]:
        """Wall-clock duration in seconds."""
        return None if self.duration_ms is None else self.duration_ms / 1000.0

    @classmethod
    def from_json(cls, d: Dict[str, Any], stdout: Optional[str] = None,
                  stderr: Optional[str] = None, base64_output: bool = False) -> "CommandResult":
        out = d.get("stdout") if stdout is None else stdout
        err = d.get("stderr") if stderr is None else stderr
        if base64_output:
            out = base64.b64decode(out).decode("utf-8", "replace") if out else ""
            err = base64.b64decode(err).decode("utf-8", "replace") if err else ""
        ec = d.get("exit_code")
        em = d.get("error")
        return cls(
            exit_code=int(ec) if isinstance(ec, (int, float)) else None,
            stdout=out or "",
            stderr=err or "",
            reason=str(d.get("reason") or "exited"),
            signal=int(d.get("signal") or 0),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
            duration_ms=d.get("duration_ms"),
            cpu_ms=d.get("cpu_ms"),
            memory_peak_bytes=d.get("memory_peak_bytes"),
            id=d.get("id"),
            error_message=em if isinstance(em, str) and em else None,
            raw=d,
        )


@dataclass
class CommandInfo:
    """A command as listed by ``sandbox.commands.list()``."""
    id: str
    cmd: Union[str, List[str], None]
    state: str
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    pid: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "CommandInfo":
        return cls(id=str(d.get("id", "")), cmd=d.get("cmd"), state=str(d.get("state", "")),
                   exit_code=d.get("exit_code"), reason=d.get("reason"), pid=d.get("pid"),
                   raw=d)


class FileType:
    """Values of :attr:`EntryInfo.type`."""
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass
class EntryInfo:
    """A filesystem entry inside a sandbox (``type``: file, dir, symlink, other).

    ``mode`` is the permission bits as an int (the API sends an octal string);
    ``target`` is the symlink target when ``type == "symlink"``.
    """
    name: str
    path: str
    type: str
    size: int = 0
    mode: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    mtime: Optional[datetime] = None
    target: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_dir(self) -> bool:
        return self.type == FileType.DIR

    @property
    def is_file(self) -> bool:
        return self.type == FileType.FILE

    @property
    def symlink_target(self) -> Optional[str]:
        return self.target

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "EntryInfo":
        mode = d.get("mode")
        if isinstance(mode, str):
            try:
                mode = int(mode, 8)
            except ValueError:
                mode = None
        mtime = d.get("mtime")
        if isinstance(mtime, (int, float)):
            from datetime import timezone
            mtime_dt: Optional[datetime] = datetime.fromtimestamp(mtime, tz=timezone.utc)
        else:
            mtime_dt = _dt(mtime)
        path = str(d.get("path", ""))
        name = d.get("name")
        if name is None:
            name = path.rstrip("/").rsplit("/", 1)[-1]
        return cls(name=str(name), path=path, type=str(d.get("type", "")),
                   size=int(d.get("size") or 0), mode=mode, uid=d.get("uid"),
                   gid=d.get("gid"), mtime=mtime_dt, target=d.get("target") or None, raw=d)


@dataclass
class Event:
    """One entry of a sandbox's event stream (``created``, ``command_started``,
    ``command_finished``, ``timeout``, ``killed``, ``failed``, ``adopted``...)."""
    seq: int
    type: str
    time: Optional[datetime] = None
    detail: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Event":
        return cls(seq=int(d.get("seq") or 0), type=str(d.get("type", "")),
                   time=_dt(d.get("time")), detail=dict(d.get("detail") or {}), raw=d)


@dataclass
class UploadResult:
    """What ``files.upload_dir`` wrote: number of entries and bytes."""
    files: int
    bytes: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "UploadResult":
        return cls(files=int(d.get("files") or 0), bytes=int(d.get("bytes") or 0), raw=d)
