"""A sandbox's network policy (docs/API.md, "Network").

``sb.network.get()`` returns the policy in force with ``enforced`` and the
``refusals`` (``total``, ``reported``, ``pending``, ``events_dropped``,
``recent``); ``sb.network.update(...)`` merges a change (what is not named
stays as it is) and returns the same object. A typical flow::

    sb = Sandbox.create(image="python", network={"mode": "allowlist",
                                                  "services": ["pypi"]})
    sb.commands.run("pip install -r requirements.txt")
    sb.network.update(mode="none")
"""
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence

from ._http import seg

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox
    from .sandbox_async import AsyncSandbox

Rule = Mapping[str, Any]  # {"cidr": "10.0.0.0/8", "ports": "443", "protocol": "tcp"}


def patch_body(established: Optional[str], mode: Optional[str], allow: Optional[Sequence[Rule]],
               allow_add: Optional[Sequence[Rule]], allow_remove: Optional[Sequence[Rule]],
               domains: Optional[Sequence[str]], domains_add: Optional[Sequence[str]],
               domains_remove: Optional[Sequence[str]], services: Optional[Sequence[str]],
               services_add: Optional[Sequence[str]],
               services_remove: Optional[Sequence[str]]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if established is not None:
        body["established"] = established
    for key, v in (("mode", mode), ("allow", allow), ("allow_add", allow_add),
                   ("allow_remove", allow_remove), ("domains", domains),
                   ("domains_add", domains_add), ("domains_remove", domains_remove),
                   ("services", services), ("services_add", services_add),
                   ("services_remove", services_remove)):
        if v is None:
            continue
        if key == "mode":
            body[key] = v
        elif key.startswith("allow"):
            body[key] = [dict(r) for r in v]
        else:
            if isinstance(v, str):
                raise TypeError(f"{key} must be a list of names, not a string")
            body[key] = list(v)
    return body


class Network:
    """``sb.network``: the network policy of a :class:`warren.Sandbox`."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb

    def get(self) -> Dict[str, Any]:
        """The policy in force, whether it is enforced, and the refusals."""
        return self._sb._http.json("GET", f"/sandboxes/{seg(self._sb.sandbox_id)}/network")

    def update(self, *, mode: Optional[str] = None, allow: Optional[Sequence[Rule]] = None,
               allow_add: Optional[Sequence[Rule]] = None,
               allow_remove: Optional[Sequence[Rule]] = None,
               domains: Optional[Sequence[str]] = None,
               domains_add: Optional[Sequence[str]] = None,
               domains_remove: Optional[Sequence[str]] = None,
               services: Optional[Sequence[str]] = None,
               services_add: Optional[Sequence[str]] = None,
               services_remove: Optional[Sequence[str]] = None,
               established: Optional[str] = None) -> Dict[str, Any]:
        """Change the policy atomically. ``mode``, ``allow``, ``domains`` and
        ``services`` replace; the ``*_add``/``*_remove`` lists edit (removes
        first; removing what is not there is an :class:`InvalidArgumentError`
        naming it, and then nothing changes). New connections follow the new
        policy at once; established TCP connections are kept unless
        ``established="cut"``, which makes their packets follow it too."""
        body = patch_body(established, mode, allow, allow_add, allow_remove, domains,
                          domains_add, domains_remove, services, services_add,
                          services_remove)
        return self._sb._http.json("PATCH", f"/sandboxes/{seg(self._sb.sandbox_id)}/network",
                                   json=body)


class AsyncNetwork:
    """``sb.network`` of a :class:`warren.AsyncSandbox` (same as :class:`Network`)."""

    def __init__(self, sb: "AsyncSandbox") -> None:
        self._sb = sb

    async def get(self) -> Dict[str, Any]:
        return await self._sb._http.json("GET",
                                         f"/sandboxes/{seg(self._sb.sandbox_id)}/network")

    async def update(self, *, mode: Optional[str] = None,
                     allow: Optional[Sequence[Rule]] = None,
                     allow_add: Optional[Sequence[Rule]] = None,
                     allow_remove: Optional[Sequence[Rule]] = None,
                     domains: Optional[Sequence[str]] = None,
                     domains_add: Optional[Sequence[str]] = None,
                     domains_remove: Optional[Sequence[str]] = None,
                     services: Optional[Sequence[str]] = None,
                     services_add: Optional[Sequence[str]] = None,
                     services_remove: Optional[Sequence[str]] = None,
                     established: Optional[str] = None) -> Dict[str, Any]:
        body = patch_body(established, mode, allow, allow_add, allow_remove, domains, domains_add,
                          domains_remove, services, services_add, services_remove)
        return await self._sb._http.json(
            "PATCH", f"/sandboxes/{seg(self._sb.sandbox_id)}/network", json=body)
