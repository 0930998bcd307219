"""Registry push and pull for the image store (``POST /v1/images/pull``,
``POST /v1/images/{ref}/push``), as methods of :class:`warren.images.Images`
and :class:`warren.images.AsyncImages` and as module-level functions::

    from warren.images import Images

    imgs = Images()
    img = imgs.pull("registry.example.com/team/py:3.12", name="py:3.12",
                    username="ci", password=os.environ["REG_PASSWORD"])
    print(img.digest, img.raw["pull"]["bytes_fetched"])
    imgs.push("py:3.12", "registry.example.com/team/py:3.12-warren", token=tok)

    # or, with a default client from the environment:
    from warren import registry
    registry.pull("127.0.0.1:5000/team/py:3.12", lazy=True)

Credentials (``username`` + ``password``, or ``token``) go to the daemon
with the one request and are not stored there; ``insecure=True`` allows
plain http and unverified TLS (loopback registries need no flag).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:
    from .images import ImageInfo

__all__ = ["RegistryOps", "AsyncRegistryOps", "pull", "push"]


def _auth(body: Dict[str, Any], username: Optional[str], password: Optional[str],
          token: Optional[str], insecure: bool) -> Dict[str, Any]:
    if (username is None) != (password is None):
        raise ValueError("username and password go together")
    if token is not None and username is not None:
        raise ValueError("give username/password or token, not both")
    if username is not None:
        body["auth"] = {"username": username, "password": password}
    elif token is not None:
        body["auth"] = {"token": token}
    if insecure:
        body["insecure"] = True
    return body


def _pull_body(ref: str, name: Optional[str], lazy: bool, platform: Optional[str],
               **auth: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"ref": ref, "lazy": bool(lazy)}
    if name is not None:
        body["as"] = name
    if platform is not None:
        body["platform"] = platform
    return _auth(body, **auth)


def _push_body(to: str, chunk_size: int, **auth: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"to": to}
    if chunk_size:
        body["chunk_size"] = int(chunk_size)
    return _auth(body, **auth)


class RegistryOps:
    """``pull`` and ``push`` of :class:`warren.images.Images`."""

    def pull(self, ref: str, *, name: Optional[str] = None, lazy: bool = False,
             platform: Optional[str] = None, username: Optional[str] = None,
             password: Optional[str] = None, token: Optional[str] = None,
             insecure: bool = False) -> "ImageInfo":
        """Pull ``host[:port]/repo[:tag|@sha256:...]`` into the store and
        name it ``name`` (default: the repository path and tag). A warren
        artifact is taken as is (``lazy``: recorded, fetched on demand); any
        other OCI/Docker image is converted on the node. The answer's
        ``pull`` object (bytes fetched, ``already``...) is in ``.raw``."""
        from .images import ImageInfo
        body = _pull_body(ref, name, lazy, platform, username=username, password=password,
                          token=token, insecure=insecure)
        return ImageInfo.from_json(self._http.json(  # type: ignore[attr-defined]
            "POST", "/images/pull", json=body, timeout=None))

    def push(self, ref: str, to: str, *, chunk_size: int = 0, username: Optional[str] = None,
             password: Optional[str] = None, token: Optional[str] = None,
             insecure: bool = False) -> Dict[str, Any]:
        """Push the store image ``ref`` to ``host[:port]/repo[:tag]``.
        Returns ``{"digest", "to", "manifest_digest", "blobs_sent",
        "blobs_skipped", "bytes_sent"}``."""
        body = _push_body(to, chunk_size, username=username, password=password, token=token,
                          insecure=insecure)
        return self._call("POST", ref, "/push", json=body,  # type: ignore[attr-defined]
                          timeout=None)


class AsyncRegistryOps:
    """``pull`` and ``push`` of :class:`warren.images.AsyncImages`."""

    async def pull(self, ref: str, *, name: Optional[str] = None, lazy: bool = False,
                   platform: Optional[str] = None, username: Optional[str] = None,
                   password: Optional[str] = None, token: Optional[str] = None,
                   insecure: bool = False) -> "ImageInfo":
        from .images import ImageInfo
        body = _pull_body(ref, name, lazy, platform, username=username, password=password,
                          token=token, insecure=insecure)
        return ImageInfo.from_json(await self._http.json(  # type: ignore[attr-defined]
            "POST", "/images/pull", json=body, timeout=None))

    async def push(self, ref: str, to: str, *, chunk_size: int = 0,
                   username: Optional[str] = None, password: Optional[str] = None,
                   token: Optional[str] = None, insecure: bool = False) -> Dict[str, Any]:
        body = _push_body(to, chunk_size, username=username, password=password, token=token,
                          insecure=insecure)
        return await self._call("POST", ref, "/push", json=body,  # type: ignore[attr-defined]
                                timeout=None)


def pull(ref: str, **kw: Any) -> "ImageInfo":
    """:meth:`RegistryOps.pull` with a default client (connection keywords
    ``socket``, ``base_url``, ``api_key`` are accepted too)."""
    from .images import Images
    conn = {k: kw.pop(k) for k in ("socket", "base_url", "api_key", "request_timeout")
            if k in kw}
    return Images(**conn).pull(ref, **kw)


def push(ref: str, to: str, **kw: Any) -> Dict[str, Any]:
    """:meth:`RegistryOps.push` with a default client."""
    from .images import Images
    conn = {k: kw.pop(k) for k in ("socket", "base_url", "api_key", "request_timeout")
            if k in kw}
    return Images(**conn).push(ref, to, **kw)
