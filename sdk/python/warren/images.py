"""The node's image store (``/v1/images``): import, list, inspect, tag,
remove, pin and reclaim images.

Synchronous::

    from warren.images import Images

    imgs = Images()                                # same connection options as Sandbox
    img = imgs.import_("rootfs.tar.gz", ref="py:3.12")
    print(img.digest, img.refs)
    imgs.tag("py:3.12", "py:stable")
    with Sandbox.create(image="py:stable") as sb: ...
    imgs.remove("py:3.12")
    print(imgs.gc(dry_run=True))

:class:`AsyncImages` has the same methods as coroutines. The module-level
functions (``warren.images.list()``, ``import_``, ``get``, ``tag``,
``remove``, ``pin``, ``unpin``, ``gc``) use a default :class:`Images`
built from the environment (``$WARREN_SOCKET``, ``$WARREN_URL``...).

A reference is ``name[:tag]`` (``latest`` by default), ``name@sha256:...``
or ``sha256:...`` (a unique prefix of at least 12 hex digits works).
"""
from __future__ import annotations

import builtins
import json as _json
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Dict, List, Optional, Tuple, Union

from ._http import AsyncHTTP, ConnectionConfig, SyncHTTP, seg
from .models import Event, _dt
from .registry import AsyncRegistryOps, RegistryOps  # push and pull (branch registry)

__all__ = ["ImageInfo", "Images", "AsyncImages", "list", "import_", "get", "tag", "remove",
           "pin", "unpin", "gc"]

Source = Union[str, "os.PathLike[str]", bytes, bytearray, IO[bytes]]


@dataclass
class ImageInfo:
    """An image of the store (``GET /v1/images/{ref}``)."""
    digest: str
    size: int
    source: str
    created: Optional[datetime]
    last_used: Optional[datetime]
    pinned: bool
    complete: bool
    holders: int
    refs: List[str]
    layers: List[str]
    config: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)
    #: ``"rootfs"``, or ``"vm-disk"``: a bootable disk for ``tier="vm"``
    kind: str = "rootfs"
    #: vm-disk only: ``{"format": "raw"|"qcow2", "virtual_size": bytes}``
    disk: Optional[Dict[str, Any]] = None

    @property
    def labels(self) -> Dict[str, str]:
        """The image config's labels."""
        return dict((self.config or {}).get("labels") or {})

    @property
    def processes(self) -> Optional[str]:
        """A snapshot taken with ``processes=True``: the digest of the image
        holding its processes (``None`` otherwise)."""
        return self.labels.get("dev.warren.snapshot.processes")

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ImageInfo":
        return cls(digest=d["digest"], size=int(d.get("size", 0)), source=d.get("source", ""),
                   created=_dt(d.get("created")), last_used=_dt(d.get("last_used")),
                   pinned=bool(d.get("pinned")), complete=bool(d.get("complete", True)),
                   holders=int(d.get("holders", 0)), refs=builtins.list(d.get("refs") or []),
                   layers=builtins.list(d.get("layers") or []),
                   config=dict(d.get("config") or {}), raw=d,
                   kind=d.get("kind") or "rootfs", disk=d.get("disk"))


def _canon(ref: str) -> str:
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last else ref + ":latest"


def _where(ref: str) -> Tuple[str, Dict[str, Optional[str]]]:
    """Path segment and query of a ref: a path segment cannot hold '/', so
    such names go as ``-`` with ``?ref=``."""
    if "/" in ref:
        return "-", {"ref": ref}
    return seg(ref), {}


def _import_request(source: Source, ref: Optional[str], format: Optional[str],
                    node_path: bool, firmware: Optional[str] = None) -> Dict[str, Any]:
    params = {"ref": ref, "format": format, "firmware": firmware}
    if isinstance(source, (bytes, bytearray)):
        return {"params": params, "content": bytes(source)}
    if hasattr(source, "read"):
        return {"params": params, "content": source}
    path = os.fspath(source)
    if node_path or os.path.isdir(path):
        body = {"path": os.path.abspath(path)}
        if format:
            body["format"] = format
        if ref:
            body["ref"] = ref
        if firmware is not None:
            body["firmware"] = firmware
        return {"params": None, "content": _json.dumps(body).encode(),
                "headers": {"Content-Type": "application/json"}}
    return {"params": params, "path": path}


def _build_vm_body(image: str, ref: Optional[str], size: Optional[Union[int, str]],
                   firmware: Optional[str] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"image": image}
    if firmware is not None:
        body["firmware"] = firmware
    if ref is not None:
        body["ref"] = ref
    if size is not None:
        body["size"] = size
    return body


class Images(RegistryOps):
    """Synchronous access to the image store of one daemon."""

    def __init__(self, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = SyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                       api_key=api_key,
                                                       request_timeout=request_timeout))

    def list(self) -> List[ImageInfo]:
        d = self._http.json("GET", "/images")
        return [ImageInfo.from_json(x) for x in d["images"]]

    def import_(self, source: Source, *, ref: Optional[str] = None,
                format: Optional[str] = None, node_path: bool = False,
                firmware: Optional[str] = None) -> ImageInfo:
        """Import a tar (plain/gz/zstd), a ``docker save``/``podman save``
        archive (path, bytes or a binary file object, streamed), or, read on
        the daemon's node (Unix socket only), a directory: a rootfs or an OCI
        layout (``node_path=True`` sends any path that way). ``firmware``:
        see :meth:`import_vm_disk`."""
        rq = _import_request(source, ref, format, node_path, firmware)
        if "path" in rq:
            with open(rq["path"], "rb") as f:
                d = self._http.json("POST", "/images/import", params=rq["params"], content=f,
                                    timeout=None)
        else:
            d = self._http.json("POST", "/images/import", params=rq["params"],
                                content=rq["content"], headers=rq.get("headers"),
                                timeout=None)
        return ImageInfo.from_json(d)

    def import_vm_disk(self, source: Source, *, ref: Optional[str] = None,
                       node_path: bool = False, firmware: Optional[str] = None) -> ImageInfo:
        """Import a bootable disk (raw or qcow2) for ``tier="vm"``: the
        same as ``import_(..., format="vm-disk")``. ``firmware``: how its
        VMs boot, ``"bios"`` (SeaBIOS), ``"uefi"`` (OVMF) or
        ``"uefi-secure"`` (OVMF with Secure Boot, Microsoft's keys enrolled:
        the disk must boot a signed chain, e.g. shim); default: detected
        from the disk (an EFI system partition means UEFI)."""
        return self.import_(source, ref=ref, format="vm-disk", node_path=node_path,
                            firmware=firmware)

    def _call(self, method: str, ref: str, suffix: str = "", **kw: Any) -> Any:
        s, q = _where(ref)
        q.update(kw.pop("params", {}))
        return self._http.json(method, f"/images/{s}{suffix}", params=q, **kw)

    def get(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(self._call("GET", ref))

    def build_vm(self, image: str, *, ref: Optional[str] = None,
                 size: Optional[Union[int, str]] = None,
                 firmware: Optional[str] = None) -> ImageInfo:
        """Build a bootable disk (a ``vm-disk`` image for ``tier="vm"``) on
        the node from the rootfs image ``image`` (it must bring systemd and
        qemu-guest-agent) and Debian's cloud kernel; ``size`` in bytes or
        like ``"20G"`` (default 4G); ``firmware`` ``"bios"`` (default:
        an MBR disk with GRUB for SeaBIOS), ``"uefi"`` (a GPT disk with
        an EFI system partition, booted with OVMF) or ``"uefi-secure"``
        (the same with Debian's shim, signed GRUB and signed kernel,
        booted with Secure Boot). Takes minutes."""
        return ImageInfo.from_json(self._http.json(
            "POST", "/images/build-vm", json=_build_vm_body(image, ref, size, firmware),
            timeout=None))

    def tag(self, ref: str, new_ref: str) -> ImageInfo:
        return ImageInfo.from_json(self._call("POST", ref, "/tag", json={"ref": new_ref}))

    def remove(self, ref: str, *, force: bool = False) -> bool:
        """Drop a name (and the image when nothing else keeps it), or an
        image by digest. Returns whether the image itself was removed."""
        d = self._call("DELETE", ref, params={"force": "1" if force else None})
        return bool(d.get("removed"))

    def pin(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(self._call("POST", ref, "/pin"))

    def unpin(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(self._call("POST", ref, "/unpin"))

    def gc(self, *, dry_run: bool = False, prune_untagged: bool = False) -> Dict[str, Any]:
        return self._http.json("POST", "/images/gc", timeout=None,
                               params={"dry_run": "1" if dry_run else None,
                                       "prune_untagged": "1" if prune_untagged else None})

    def events(self, since: int = 0, limit: Optional[int] = None) -> List[Event]:
        """The node's image events (``image_imported``, ``image_removed``)
        with seq > since."""
        d = self._http.json("GET", "/images/events", params={"since": since, "limit": limit})
        return [Event.from_json(e) for e in d.get("events", [])]


class AsyncImages(AsyncRegistryOps):
    """The same as :class:`Images`, with coroutines."""

    def __init__(self, *, socket: Optional[str] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        self._http = AsyncHTTP(ConnectionConfig.resolve(socket=socket, base_url=base_url,
                                                        api_key=api_key,
                                                        request_timeout=request_timeout))

    async def list(self) -> List[ImageInfo]:
        d = await self._http.json("GET", "/images")
        return [ImageInfo.from_json(x) for x in d["images"]]

    async def import_(self, source: Source, *, ref: Optional[str] = None,
                      format: Optional[str] = None, node_path: bool = False,
                      firmware: Optional[str] = None) -> ImageInfo:
        rq = _import_request(source, ref, format, node_path, firmware)
        if "path" in rq:
            with open(rq["path"], "rb") as f:
                content = f.read()
        else:
            content = rq["content"]
            if hasattr(content, "read"):
                content = content.read()
        d = await self._http.json("POST", "/images/import", params=rq["params"],
                                  content=content, headers=rq.get("headers"), timeout=None)
        return ImageInfo.from_json(d)

    async def import_vm_disk(self, source: Source, *, ref: Optional[str] = None,
                             node_path: bool = False,
                             firmware: Optional[str] = None) -> ImageInfo:
        """See :meth:`Images.import_vm_disk`."""
        return await self.import_(source, ref=ref, format="vm-disk", node_path=node_path,
                                  firmware=firmware)

    async def _call(self, method: str, ref: str, suffix: str = "", **kw: Any) -> Any:
        s, q = _where(ref)
        q.update(kw.pop("params", {}))
        return await self._http.json(method, f"/images/{s}{suffix}", params=q, **kw)

    async def get(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(await self._call("GET", ref))

    async def build_vm(self, image: str, *, ref: Optional[str] = None,
                       size: Optional[Union[int, str]] = None,
                       firmware: Optional[str] = None) -> ImageInfo:
        """See :meth:`Images.build_vm`."""
        return ImageInfo.from_json(await self._http.json(
            "POST", "/images/build-vm", json=_build_vm_body(image, ref, size, firmware),
            timeout=None))

    async def tag(self, ref: str, new_ref: str) -> ImageInfo:
        return ImageInfo.from_json(await self._call("POST", ref, "/tag",
                                                    json={"ref": new_ref}))

    async def remove(self, ref: str, *, force: bool = False) -> bool:
        d = await self._call("DELETE", ref, params={"force": "1" if force else None})
        return bool(d.get("removed"))

    async def pin(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(await self._call("POST", ref, "/pin"))

    async def unpin(self, ref: str) -> ImageInfo:
        return ImageInfo.from_json(await self._call("POST", ref, "/unpin"))

    async def gc(self, *, dry_run: bool = False,
                 prune_untagged: bool = False) -> Dict[str, Any]:
        return await self._http.json("POST", "/images/gc", timeout=None,
                                     params={"dry_run": "1" if dry_run else None,
                                             "prune_untagged": "1" if prune_untagged else None})

    async def events(self, since: int = 0, limit: Optional[int] = None) -> List[Event]:
        d = await self._http.json("GET", "/images/events",
                                  params={"since": since, "limit": limit})
        return [Event.from_json(e) for e in d.get("events", [])]


# ---- module-level shortcuts (a default client from the environment) -------

def list(**conn: Any) -> List[ImageInfo]:  # noqa: A001 (the API's verb)
    return Images(**conn).list()


def import_(source: Source, *, ref: Optional[str] = None, format: Optional[str] = None,
            node_path: bool = False, firmware: Optional[str] = None,
            **conn: Any) -> ImageInfo:
    return Images(**conn).import_(source, ref=ref, format=format, node_path=node_path,
                                  firmware=firmware)


def get(ref: str, **conn: Any) -> ImageInfo:
    return Images(**conn).get(ref)


def tag(ref: str, new_ref: str, **conn: Any) -> ImageInfo:
    return Images(**conn).tag(ref, new_ref)


def remove(ref: str, *, force: bool = False, **conn: Any) -> bool:
    return Images(**conn).remove(ref, force=force)


def pin(ref: str, **conn: Any) -> ImageInfo:
    return Images(**conn).pin(ref)


def unpin(ref: str, **conn: Any) -> ImageInfo:
    return Images(**conn).unpin(ref)


def gc(*, dry_run: bool = False, prune_untagged: bool = False, **conn: Any) -> Dict[str, Any]:
    return Images(**conn).gc(dry_run=dry_run, prune_untagged=prune_untagged)
