"""A sandbox's published ports (docs/API-NETWORK.md, "Published ports").

A published port makes a TCP port of a networked sandbox reachable from the
host: on loopback (the default, through a relay in warrend), on ``0.0.0.0``
or an address of the host (NAT for a non-loopback address), or on a Unix
socket of the daemon's::

    sb = Sandbox.create(image="python", network={"mode": "open"})
    sb.commands.run("python3 -m http.server 8000", background=True)
    p = sb.ports.publish(8000)           # PortInfo(port=8000, host='127.0.0.1', ...)
    urllib.request.urlopen(f"http://{p.host}:{p.host_port}/")
    sb.ports.unpublish(8000)

A sandbox's publications go with it; they do not survive a daemon restart.
"""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._http import seg

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox
    from .sandbox_async import AsyncSandbox


@dataclass
class PortInfo:
    """One publication of a sandbox port."""
    port: int                        #: the sandbox's port
    host: Optional[str] = None       #: host address (None for a Unix socket)
    host_port: Optional[int] = None  #: host port (None for a Unix socket)
    unix: Optional[str] = None       #: Unix socket path (``unix=True``)
    via: str = ""                    #: "nat" or "relay"
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PortInfo":
        return cls(port=int(d["port"]), host=d.get("host"),
                   host_port=int(d["host_port"]) if "host_port" in d else None,
                   unix=d.get("unix"), via=str(d.get("via", "")), raw=dict(d))


def publish_body(port: int, host: Optional[str], host_port: Optional[int],
                 unix: bool) -> Dict[str, Any]:
    for name, v in (("port", port), ("host_port", host_port)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    body: Dict[str, Any] = {"port": port}
    if host is not None:
        body["host"] = host
    if host_port is not None:
        body["host_port"] = host_port
    if unix:
        body["unix"] = True
    return body


def _port_path(sid: str, port: Optional[int] = None) -> str:
    base = f"/sandboxes/{seg(sid)}/ports"
    if port is None:
        return base
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {type(port).__name__}")
    return f"{base}/{port}"


class Ports:
    """``sb.ports``: the published ports of a :class:`warren.Sandbox`."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb

    def publish(self, port: int, *, host: Optional[str] = None, host_port: Optional[int] = None,
                unix: bool = False) -> PortInfo:
        """Publish the sandbox's TCP ``port``: on ``host`` (default
        127.0.0.1) and ``host_port`` (default: a free port, see the answer),
        or with ``unix=True`` on a Unix socket. A port taken on the host is a
        :class:`ConflictError`; a sandbox without networking too."""
        d = self._sb._http.json("POST", _port_path(self._sb.sandbox_id),
                                json=publish_body(port, host, host_port, unix))
        return PortInfo.from_json(d)

    def list(self) -> List[PortInfo]:
        d = self._sb._http.json("GET", _port_path(self._sb.sandbox_id))
        return [PortInfo.from_json(p) for p in d.get("ports", [])]

    def unpublish(self, port: int) -> None:
        """Remove every publication of the sandbox's ``port``."""
        self._sb._http.json("DELETE", _port_path(self._sb.sandbox_id, port))


class AsyncPorts:
    """``sb.ports`` of a :class:`warren.AsyncSandbox` (same as :class:`Ports`)."""

    def __init__(self, sb: "AsyncSandbox") -> None:
        self._sb = sb

    async def publish(self, port: int, *, host: Optional[str] = None,
                      host_port: Optional[int] = None, unix: bool = False) -> PortInfo:
        d = await self._sb._http.json("POST", _port_path(self._sb.sandbox_id),
                                      json=publish_body(port, host, host_port, unix))
        return PortInfo.from_json(d)

    async def list(self) -> List[PortInfo]:
        d = await self._sb._http.json("GET", _port_path(self._sb.sandbox_id))
        return [PortInfo.from_json(p) for p in d.get("ports", [])]

    async def unpublish(self, port: int) -> None:
        await self._sb._http.json("DELETE", _port_path(self._sb.sandbox_id, port))
