"""Leases: a training job's hold on its sandboxes.

A trainer creates a lease, creates its sandboxes under it, and heartbeats
while it runs::

    from warren import Lease, Sandbox

    with Lease.create("job-42", grace_s=30, expire_s=3600) as lease:  # heartbeats
        sb = Sandbox.create(image="busybox", lease=lease)
        ...                                   # train; the sandboxes stay running

When heartbeats stop for ``grace_s`` (the job was preempted, the trainer
died) the daemon pauses the lease's sandboxes, memory kept; the next
heartbeat resumes them. After ``expire_s`` without one, ``on_expire``
applies: ``"kill"``, ``"pause"`` or ``"snapshot"`` (kept paused on nodes
without snapshots). Frameworks that know they are being preempted call
:meth:`Lease.suspend` and later :meth:`Lease.resume`; :meth:`Lease.release`
ends the lease (killing its sandboxes unless ``keep=True``).

The context manager heartbeats in a background thread (:meth:`keep_alive`)
and stops it on exit, leaving the lease as it is (heartbeats then stop: the
grace period applies). :class:`AsyncLease` is the same with asyncio tasks.
"""
import asyncio
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional

from ._common import drop_none
from ._http import AsyncHTTP, ConnectionConfig, SyncHTTP, seg
from .exceptions import ConflictError, NotFoundError, WarrenError
from .models import _dt


@dataclass
class LeaseInfo:
    """A lease as the daemon last described it."""
    lease_id: str
    state: str  #: active, suspended, expired, released
    suspend_reason: Optional[str] = None  #: suspended: heartbeat or request
    grace_s: float = 0.0
    expire_s: float = 0.0
    on_expire: Optional[str] = None
    created_at: Optional[datetime] = None
    last_heartbeat_at: Optional[datetime] = None
    suspends_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    ended_action: Optional[str] = None
    sandboxes: int = 0
    keep_memory: bool = True  #: False: suspended, its sandboxes go to disk
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> str:
        return self.lease_id

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "LeaseInfo":
        return cls(lease_id=str(d.get("id", "")), state=str(d.get("state", "")),
                   suspend_reason=d.get("suspend_reason"),
                   grace_s=float(d.get("grace_s") or 0), expire_s=float(d.get("expire_s") or 0),
                   on_expire=d.get("on_expire"), created_at=_dt(d.get("created_at")),
                   last_heartbeat_at=_dt(d.get("last_heartbeat_at")),
                   suspends_at=_dt(d.get("suspends_at")), expires_at=_dt(d.get("expires_at")),
                   ended_at=_dt(d.get("ended_at")), ended_action=d.get("ended_action"),
                   sandboxes=int(d.get("sandboxes") or 0),
                   keep_memory=d.get("keep_memory", True) is not False, raw=d)


def _create_body(lease_id: Optional[str], grace_s: Optional[float], expire_s: Optional[float],
                 on_expire: Optional[str], keep_memory: Optional[bool] = None) -> Dict[str, Any]:
    if keep_memory is not None and not isinstance(keep_memory, bool):
        raise TypeError(f"keep_memory must be a bool (got {keep_memory!r})")
    return drop_none({"id": lease_id, "grace_s": grace_s, "expire_s": expire_s,
                      "on_expire": on_expire, "keep_memory": keep_memory})


def _interval(info: Optional[LeaseInfo], interval: Optional[float]) -> float:
    if interval is not None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        return interval
    # three beats per grace period: one lost beat never suspends the lease
    grace = info.grace_s if info and info.grace_s else 60.0
    return max(0.05, grace / 3)


class _LeaseBase:
    """What :class:`Lease` and :class:`AsyncLease` share: the connection,
    the lease's id and its last known state."""

    _HTTP: Any = None  # the HTTP client class of the subclass

    def __init__(self, lease_id: str, *, socket: Optional[str] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None,
                 _config: Optional[ConnectionConfig] = None,
                 _info: Optional[LeaseInfo] = None) -> None:
        cfg = _config or ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                  api_key=api_key,
                                                  request_timeout=request_timeout)
        self._http = self._HTTP(cfg)
        self._id = lease_id
        self._info = _info
        #: the last error of the background heartbeat (None when it is fine)
        self.heartbeat_error: Optional[BaseException] = None
        self._init_heartbeat()

    def _init_heartbeat(self) -> None:
        """The subclass's background heartbeat state (a thread or a task)."""

    @property
    def lease_id(self) -> str:
        return self._id

    id = lease_id

    @property
    def info(self) -> Optional[LeaseInfo]:
        return self._info


class Lease(_LeaseBase):
    """A lease, driven synchronously (see the module's documentation)."""

    _HTTP = SyncHTTP

    def _init_heartbeat(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def __repr__(self) -> str:
        return f"Lease(lease_id={self._id!r})"

    @classmethod
    def create(cls, lease_id: Optional[str] = None, *, grace_s: Optional[float] = None,
               expire_s: Optional[float] = None, on_expire: Optional[str] = None,
               keep_memory: Optional[bool] = None,
               socket: Optional[str] = None, base_url: Optional[str] = None,
               api_key: Optional[str] = None,
               request_timeout: Optional[float] = None) -> "Lease":
        """Create a lease (``lease_id`` generated when None). ``grace_s``
        (default 60): heartbeats may stop this long before the sandboxes are
        paused; ``expire_s`` (default 3600): then ``on_expire`` (``"kill"``
        default, ``"pause"``, ``"snapshot"``) applies. ``keep_memory=False``:
        paused, the sandboxes go to disk, their memory freed, where they
        can (see :meth:`Sandbox.pause`); the others stay paused in memory.

        Raises :class:`ConflictError` if a live lease of that id exists."""
        cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key,
                                       request_timeout=request_timeout)
        d = SyncHTTP(cfg).json("POST", "/leases",
                               json=_create_body(lease_id, grace_s, expire_s, on_expire,
                                                 keep_memory))
        info = LeaseInfo.from_json(d)
        return cls(info.lease_id, _config=cfg, _info=info)

    @classmethod
    def connect(cls, lease_id: str, *, socket: Optional[str] = None,
                base_url: Optional[str] = None, api_key: Optional[str] = None,
                request_timeout: Optional[float] = None) -> "Lease":
        """Attach to an existing lease of this tenant (:class:`NotFoundError`
        otherwise)."""
        lease = cls(lease_id, socket=socket, base_url=base_url, api_key=api_key,
                    request_timeout=request_timeout)
        lease.get_info()
        return lease

    @classmethod
    def list(cls, *, socket: Optional[str] = None, base_url: Optional[str] = None,
             api_key: Optional[str] = None,
             request_timeout: Optional[float] = None) -> List[LeaseInfo]:
        """Every lease of this tenant."""
        http = SyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                 api_key=api_key,
                                                 request_timeout=request_timeout))
        return [LeaseInfo.from_json(x) for x in (http.json("GET", "/leases") or {}).get(
            "leases", [])]

    def _call(self, op: str, body: Any = None) -> LeaseInfo:
        self._info = LeaseInfo.from_json(
            self._http.json("POST", f"/leases/{seg(self._id)}/{op}", json=body))
        return self._info

    def get_info(self) -> LeaseInfo:
        self._info = LeaseInfo.from_json(self._http.json("GET", f"/leases/{seg(self._id)}"))
        return self._info

    def heartbeat(self) -> LeaseInfo:
        """Keep the lease alive; resumes sandboxes paused for missed
        heartbeats. :class:`ConflictError` once the lease has ended."""
        return self._call("heartbeat")

    def suspend(self) -> LeaseInfo:
        """Pause the lease's sandboxes now (returns once they are paused);
        they stay paused until :meth:`resume`, heartbeats or not."""
        return self._call("suspend")

    def resume(self) -> LeaseInfo:
        """Resume what the lease paused (returns once they run)."""
        return self._call("resume")

    def release(self, keep: bool = False) -> LeaseInfo:
        """End the lease: its sandboxes are killed, or with ``keep`` live on
        (resumed) on their own timeouts. Stops the background heartbeat."""
        self.stop_heartbeat()
        return self._call("release", {"sandboxes": "keep" if keep else "kill"})

    # ---- background heartbeat --------------------------------------------

    def keep_alive(self, interval: Optional[float] = None) -> "Lease":
        """Heartbeat every ``interval`` seconds (default: a third of the
        grace period) on a daemon thread until :meth:`stop_heartbeat`. A
        failed beat (daemon restarting) is retried at the next one and kept
        in :attr:`heartbeat_error`; the thread ends when the lease ended."""
        if self._thread and self._thread.is_alive():
            return self
        every = _interval(self._info or self.get_info(), interval)
        self._stop.clear()
        beat = Lease(self._id, _config=self._http.cfg)  # its info is the thread's

        def run() -> None:
            while not self._stop.wait(every):
                try:
                    beat.heartbeat()
                    self.heartbeat_error = None
                except (ConflictError, NotFoundError) as e:
                    self.heartbeat_error = e
                    return
                except (WarrenError, OSError) as e:
                    self.heartbeat_error = e

        self._thread = threading.Thread(target=run, name=f"warren-lease-{self._id}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop_heartbeat(self) -> None:
        self._stop.set()
        t = self._thread
        if t and t is not threading.current_thread():
            t.join()
        self._thread = None

    def __enter__(self) -> "Lease":
        return self.keep_alive()

    def __exit__(self, *exc: Any) -> None:
        self.stop_heartbeat()


class AsyncLease(_LeaseBase):
    """A lease with coroutines; the background heartbeat is an asyncio task."""

    _HTTP = AsyncHTTP

    def _init_heartbeat(self) -> None:
        self._task: Optional["asyncio.Task[None]"] = None

    @classmethod
    async def create(cls, lease_id: Optional[str] = None, *, grace_s: Optional[float] = None,
                     expire_s: Optional[float] = None, on_expire: Optional[str] = None,
                     keep_memory: Optional[bool] = None,
                     socket: Optional[str] = None, base_url: Optional[str] = None,
                     api_key: Optional[str] = None,
                     request_timeout: Optional[float] = None) -> "AsyncLease":
        cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key,
                                       request_timeout=request_timeout)
        d = await AsyncHTTP(cfg).json("POST", "/leases",
                                      json=_create_body(lease_id, grace_s, expire_s, on_expire,
                                                 keep_memory))
        info = LeaseInfo.from_json(d)
        return cls(info.lease_id, _config=cfg, _info=info)

    async def _call(self, op: str, body: Any = None) -> LeaseInfo:
        self._info = LeaseInfo.from_json(
            await self._http.json("POST", f"/leases/{seg(self._id)}/{op}", json=body))
        return self._info

    async def get_info(self) -> LeaseInfo:
        self._info = LeaseInfo.from_json(
            await self._http.json("GET", f"/leases/{seg(self._id)}"))
        return self._info

    async def heartbeat(self) -> LeaseInfo:
        return await self._call("heartbeat")

    async def suspend(self) -> LeaseInfo:
        return await self._call("suspend")

    async def resume(self) -> LeaseInfo:
        return await self._call("resume")

    async def release(self, keep: bool = False) -> LeaseInfo:
        await self.stop_heartbeat()
        return await self._call("release", {"sandboxes": "keep" if keep else "kill"})

    async def keep_alive(self, interval: Optional[float] = None) -> "AsyncLease":
        if self._task and not self._task.done():
            return self
        every = _interval(self._info or await self.get_info(), interval)

        async def run() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    await self.heartbeat()
                    self.heartbeat_error = None
                except (ConflictError, NotFoundError) as e:
                    self.heartbeat_error = e
                    return
                except (WarrenError, OSError) as e:
                    self.heartbeat_error = e

        self._task = asyncio.get_running_loop().create_task(run())
        return self

    async def stop_heartbeat(self) -> None:
        t, self._task = self._task, None
        if t and t is not asyncio.current_task():
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass

    async def __aenter__(self) -> "AsyncLease":
        return await self.keep_alive()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop_heartbeat()
