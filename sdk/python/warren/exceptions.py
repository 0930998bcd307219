"""Typed exceptions mirroring the error codes of the warren API.

Every error the daemon returns has the shape
``{"error": {"code": ..., "message": ..., "field": ...}}`` and a matching HTTP
status; the SDK raises the subclass of :class:`WarrenError` that matches the
``code`` (falling back to the HTTP status when the code is unknown).
"""
from __future__ import annotations

import builtins
import json
from typing import Any, Dict, Optional, Type

__all__ = [
    "WarrenError",
    "InvalidArgumentError",
    "AuthenticationError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "ResourceExhaustedError",
    "InternalError",
    "UnavailableError",
    "WarrenConnectionError",
    "RequestTimeoutError",
    "CommandExitError",
    "CommandExitException",
    "error_from_response",
    "error_from_dict",
]


class WarrenError(Exception):
    """Base class of every error raised by the SDK.

    Attributes:
        code: the API error code (``"invalid_argument"``, ``"not_found"``, ...),
            or an SDK-side code such as ``"timeout"`` / ``"connection_failed"``.
        message: the human-readable message from the daemon.
        field: for ``invalid_argument``, the request field that was rejected
            (e.g. ``"memory_mb"`` or ``"path"``); otherwise ``None``.
        status: the HTTP status of the response (``None`` when no response was
            received, e.g. a connection failure).
    """

    code: str = "unknown"
    default_status: Optional[int] = None

    def __init__(self, message: str = "", *, code: Optional[str] = None,
                 field: Optional[str] = None, status: Optional[int] = None,
                 body: Any = None) -> None:
        self.message = message
        if code is not None:
            self.code = code
        self.field = field
        self.status = status if status is not None else self.default_status
        self.body = body
        super().__init__(message)

    def __str__(self) -> str:
        parts = [f"[{self.code}]"]
        if self.status is not None:
            parts.append(f"HTTP {self.status}:")
        parts.append(self.message or "(no message)")
        if self.field:
            parts.append(f"(field: {self.field})")
        return " ".join(parts)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
                f"field={self.field!r}, status={self.status!r})")


class InvalidArgumentError(WarrenError, ValueError):
    """400: malformed request, wrong type, unknown field, out-of-range value or
    bad path. ``field`` names the offending field."""
    code = "invalid_argument"
    default_status = 400


class AuthenticationError(WarrenError):
    """401: missing or unknown bearer token (TCP)."""
    code = "unauthenticated"
    default_status = 401


class PermissionDeniedError(WarrenError, PermissionError):
    """403: the tenant may not do this (changing the node's image store
    needs an admin tenant)."""
    code = "permission_denied"
    default_status = 403


class NotFoundError(WarrenError):
    """404: unknown route, sandbox (including another tenant's), command or file."""
    code = "not_found"
    default_status = 404


class MethodNotAllowedError(WarrenError):
    """405: known route, wrong method (an SDK/daemon version mismatch)."""
    code = "method_not_allowed"
    default_status = 405


class ConflictError(WarrenError):
    """409: the sandbox is not running (killed, timed out) or the file exists."""
    code = "conflict"
    default_status = 409


class PayloadTooLargeError(WarrenError):
    """413: body over the limit (1 MiB for JSON; the disk quota for files)."""
    code = "payload_too_large"
    default_status = 413


class UnsupportedMediaTypeError(WarrenError):
    """415: a JSON route called with another Content-Type."""
    code = "unsupported_media_type"
    default_status = 415


class ResourceExhaustedError(WarrenError):
    """429: node limits reached (too many sandboxes or requests in flight)."""
    code = "resource_exhausted"
    default_status = 429


class InternalError(WarrenError):
    """500: a daemon bug or an unexpected kernel failure."""
    code = "internal"
    default_status = 500


class UnavailableError(WarrenError):
    """503: the daemon is shutting down (or could not be reached)."""
    code = "unavailable"
    default_status = 503


class WarrenConnectionError(UnavailableError, builtins.ConnectionError):
    """The daemon could not be reached (socket missing, connection refused or
    reset). ``status`` is ``None``."""
    code = "connection_failed"
    default_status = None


class RequestTimeoutError(WarrenError, builtins.TimeoutError):
    """An HTTP request to the daemon took longer than its client-side timeout,
    or :meth:`CommandHandle.wait` ran out of time. ``status`` is ``None``."""
    code = "timeout"
    default_status = None


class CommandExitError(WarrenError):
    """Raised by ``commands.run(..., check=True)`` (and ``handle.wait(check=True)``)
    when the command did not exit with status 0.

    ``result`` holds the full :class:`~warren.models.CommandResult`; ``exit_code``,
    ``stdout``, ``stderr`` and ``reason`` are shortcuts to it.
    """
    code = "command_failed"

    def __init__(self, result: Any) -> None:
        self.result = result
        msg = f"command {result.reason}"
        if result.reason == "signaled":
            msg += f" by signal {result.signal}"
        msg += f" with exit code {result.exit_code}"
        tail = (result.stderr or "").strip().splitlines()[-1:] if result.stderr else []
        if tail:
            msg += f": {tail[0][:200]}"
        super().__init__(msg)

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def reason(self) -> str:
        return self.result.reason


#: E2B-compatible alias.
CommandExitException = CommandExitError

_BY_CODE: Dict[str, Type[WarrenError]] = {
    cls.code: cls for cls in (
        InvalidArgumentError, AuthenticationError, PermissionDeniedError, NotFoundError,
        MethodNotAllowedError,
        ConflictError, PayloadTooLargeError, UnsupportedMediaTypeError,
        ResourceExhaustedError, InternalError, UnavailableError)
}
_BY_STATUS: Dict[int, Type[WarrenError]] = {
    cls.default_status: cls for cls in _BY_CODE.values()  # type: ignore[misc]
}


def error_from_response(status: int, body: bytes) -> WarrenError:
    """Build the typed exception for an error response (status >= 400).

    Unknown codes fall back to the class for the HTTP status, then to
    :class:`InternalError` for 5xx and :class:`WarrenError` otherwise.
    A body that is not the documented JSON shape still yields an exception
    (message = the start of the body).
    """
    code = message = field = None
    parsed: Any = None
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = err.get("message") if isinstance(err.get("message"), str) else None
        field = err.get("field") if isinstance(err.get("field"), str) else None
    if message is None:
        message = body[:500].decode("utf-8", "replace").strip() if body else f"HTTP {status}"
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = InternalError if status >= 500 else WarrenError
    return cls(message, code=code or cls.code, field=field or None, status=status, body=parsed)


def error_from_dict(err: Dict[str, Any], status: Optional[int] = None) -> WarrenError:
    """Build the typed exception for an ``{"code", "message", "field"}`` object
    met outside an HTTP error response (e.g. an error line inside a stream)."""
    code = err.get("code") if isinstance(err.get("code"), str) else None
    cls = _BY_CODE.get(code or "", WarrenError)
    return cls(str(err.get("message") or code or "error"), code=code or cls.code,
               field=err.get("field") or None, status=status, body=err)
