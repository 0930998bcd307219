"""Audit events (``GET /v1/events``): what the node refused or limited, per
sandbox and layer (seccomp, landlock, bpf-net, dns, cgroup-limit, api).

Synchronous::

    import warren.events

    for e in warren.events.query(denied=True, last=5):      # the newest five
        print(e.time, e.sandbox, e.layer, e.summary, e.rule)
    for e in warren.events.follow(layer="seccomp"):         # live, until break
        print(e.summary)

    with Sandbox.create(image="busybox") as sb:
        sb.commands.run("wr-probe sys ptrace")
        print(sb.events(denied=True))                       # that sandbox's

:class:`AsyncEvents` has the same methods as coroutines (``follow`` is an
async iterator). A tenant sees only its own sandboxes' events; admins may
pass ``tenant``. Repeats merge into one event with a ``count`` (``time`` is
the first, ``last_time`` the last); a follow stream sends an event again
when its count grows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Dict, Iterable, Iterator, List, Optional, Union

from ._http import AsyncHTTP, ConnectionConfig, SyncHTTP
from ._ndjson import NDJSONDecoder
from .models import _dt

__all__ = ["AuditEvent", "Events", "AsyncEvents", "query", "follow"]

Layers = Union[str, Iterable[str], None]
Since = Union[str, int, float, datetime, None]


@dataclass
class AuditEvent:
    """One audit event (a row: ``count`` identical attempts merged)."""
    id: int
    sandbox: str
    tenant: str
    layer: str
    denied: bool
    action: str
    subject: Optional[str]
    what: Dict[str, Any]
    count: int
    severity: str
    rule: Optional[str]
    summary: str
    time: Optional[datetime]
    last_time: Optional[datetime]
    pid: int = 0
    comm: Optional[str] = None
    exe: Optional[str] = None
    rev: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "AuditEvent":
        p = d.get("process") or {}
        return cls(id=int(d.get("id") or 0), sandbox=str(d.get("sandbox") or ""),
                   tenant=str(d.get("tenant") or ""), layer=str(d.get("layer") or ""),
                   denied=bool(d.get("denied")), action=str(d.get("action") or ""),
                   subject=d.get("subject"), what=dict(d.get("what") or {}),
                   count=int(d.get("count") or 1), severity=str(d.get("severity") or ""),
                   rule=d.get("rule"), summary=str(d.get("summary") or ""),
                   time=_dt(d.get("time")), last_time=_dt(d.get("last_time")),
                   pid=int(p.get("pid") or 0), comm=p.get("comm"), exe=p.get("exe"),
                   rev=int(d.get("rev") or 0), raw=d)


def _since(v: Since) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # naive: taken as UTC
    return str(v)


def _params(sandbox: Optional[str], tenant: Optional[str], layer: Layers,
            since: Since, after: Optional[int], last: Optional[int],
            denied: Optional[bool], flagged: bool, follow: bool) -> Dict[str, Any]:
    if layer is not None and not isinstance(layer, str):
        layer = ",".join(layer)
    return {"sandbox": sandbox, "tenant": tenant, "layer": layer, "since": _since(since),
            "after": after, "limit": last,
            "denied": None if denied is None else ("true" if denied else "false"),
            "flagged": "true" if flagged else None, "follow": "true" if follow else None}


class Events:
    """Audit events over one connection (options as for :class:`Sandbox`)."""

    def __init__(self, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = SyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                       api_key=api_key,
                                                       request_timeout=request_timeout))

    @classmethod
    def _with(cls, http: SyncHTTP) -> "Events":
        e = cls.__new__(cls)
        e._http = http
        return e

    def query(self, *, sandbox: Optional[str] = None, tenant: Optional[str] = None,
              layer: Layers = None, since: Since = None, after: Optional[int] = None,
              last: Optional[int] = None, denied: Optional[bool] = None,
              flagged: bool = False) -> List[AuditEvent]:
        """Matching events, oldest first: the newest ``last`` (default 100),
        or with ``after`` (an event id) the first ones after it."""
        d = self._http.json("GET", "/events", params=_params(
            sandbox, tenant, layer, since, after, last, denied, flagged, False))
        return [AuditEvent.from_json(e) for e in d.get("events", [])]

    def follow(self, *, sandbox: Optional[str] = None, tenant: Optional[str] = None,
               layer: Layers = None, since: Since = None, after: Optional[int] = None,
               last: Optional[int] = None, denied: Optional[bool] = None,
               flagged: bool = False) -> Iterator[AuditEvent]:
        """The query's events, then new ones as they are recorded (an event
        again when its count grows). Runs until the caller stops iterating."""
        with self._http.stream("GET", "/events", params=_params(
                sandbox, tenant, layer, since, after, last, denied, flagged, True)) as resp:
            dec = NDJSONDecoder()
            for chunk in self._http.iter_bytes(resp):
                for obj in dec.feed(chunk):
                    yield AuditEvent.from_json(obj)


class AsyncEvents:
    """The same as :class:`Events`, with coroutines."""

    def __init__(self, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = AsyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                        api_key=api_key,
                                                        request_timeout=request_timeout))

    @classmethod
    def _with(cls, http: AsyncHTTP) -> "AsyncEvents":
        e = cls.__new__(cls)
        e._http = http
        return e

    async def query(self, *, sandbox: Optional[str] = None, tenant: Optional[str] = None,
                    layer: Layers = None, since: Since = None, after: Optional[int] = None,
                    last: Optional[int] = None, denied: Optional[bool] = None,
                    flagged: bool = False) -> List[AuditEvent]:
        d = await self._http.json("GET", "/events", params=_params(
            sandbox, tenant, layer, since, after, last, denied, flagged, False))
        return [AuditEvent.from_json(e) for e in d.get("events", [])]

    async def follow(self, *, sandbox: Optional[str] = None, tenant: Optional[str] = None,
                     layer: Layers = None, since: Since = None, after: Optional[int] = None,
                     last: Optional[int] = None, denied: Optional[bool] = None,
                     flagged: bool = False) -> AsyncIterator[AuditEvent]:
        async with self._http.stream("GET", "/events", params=_params(
                sandbox, tenant, layer, since, after, last, denied, flagged, True)) as resp:
            dec = NDJSONDecoder()
            async for chunk in self._http.iter_bytes(resp):
                for obj in dec.feed(chunk):
                    yield AuditEvent.from_json(obj)


# ---- module-level shortcuts (a default client from the environment) -------

def query(**kw: Any) -> List[AuditEvent]:
    """``Events().query(...)``; connection options (socket, base_url,
    api_key) may be passed along."""
    conn = {k: kw.pop(k) for k in ("socket", "base_url", "api_key", "request_timeout")
            if k in kw}
    return Events(**conn).query(**kw)


def follow(**kw: Any) -> Iterator[AuditEvent]:
    conn = {k: kw.pop(k) for k in ("socket", "base_url", "api_key", "request_timeout")
            if k in kw}
    return Events(**conn).follow(**kw)
