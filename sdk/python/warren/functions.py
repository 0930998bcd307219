"""Function calls: one sandboxed call at about the cost of a fork (the function tier).

A call runs argv, or ``code`` in a warm interpreter (``language="python"``),
in a fresh per-call sandbox forked from a zygote the daemon keeps per
(image, language, tenant)::

    import warren

    r = warren.functions.call("busybox", ["sh", "-c", "echo hi"])
    print(r.exit_code, r.stdout)                       # 0 'hi\\n'

    r = warren.functions.call("python", code="print(sum(range(1000)))",
                              language="python", timeout=5, memory_mb=128)

    results = warren.functions.batch([
        {"image": "busybox", "argv": ["echo", "a"]},
        {"image": "python", "language": "python", "code": "print(2)"},
    ])

    r = await warren.functions.acall("busybox", ["true"])   # asyncio

The result is a :class:`CommandResult`; ``reason`` is ``exited``,
``signaled``, ``timeout``, ``cpu_time``, ``oom``, ``killed`` or
``start_failed``. A call whose zygote died under it raises
:class:`UnavailableError` (safe to retry).
"""
from __future__ import annotations

import base64
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._http import AsyncHTTP, ConnectionConfig, SyncHTTP
from .exceptions import CommandExitError, InvalidArgumentError, WarrenError, error_from_response
from .models import CommandResult

__all__ = ["call", "batch", "acall", "abatch"]

FileData = Union[str, bytes]
Files = Union[Mapping[str, FileData], Sequence[Tuple[Any, ...]], None]


def _files(files: Files) -> Optional[List[Dict[str, Any]]]:
    if files is None:
        return None
    items = files.items() if isinstance(files, Mapping) else files
    out = []
    for item in items:
        path, data, *rest = item
        if not isinstance(path, str):
            raise InvalidArgumentError("files: paths must be strings", code="invalid_argument",
                                       field="files")
        e: Dict[str, Any] = {"path": path}
        if isinstance(data, str):
            e["content"] = data
        elif isinstance(data, (bytes, bytearray, memoryview)):
            e["content"] = base64.b64encode(bytes(data)).decode("ascii")
            e["encoding"] = "base64"
        else:
            raise InvalidArgumentError(f"files.{path}: content must be str or bytes",
                                       code="invalid_argument", field="files")
        if rest:
            e["mode"] = int(rest[0])
        out.append(e)
    return out


def _body(image: Optional[str], argv: Optional[Sequence[str]], *, code: Optional[str],
          language: Optional[str], stdin: Optional[str], env: Optional[Mapping[str, str]],
          files: Files, timeout: Optional[float], cpu_time: Optional[float],
          memory_mb: Optional[int], pids: Optional[int], output_cap: Optional[int],
          binary: bool) -> Dict[str, Any]:
    if isinstance(argv, str):
        raise InvalidArgumentError("argv: a list of strings (use ['sh', '-c', ...] for a "
                                   "shell line)", code="invalid_argument", field="argv")
    body: Dict[str, Any] = {"image": image, "argv": list(argv) if argv is not None else None,
                            "code": code, "language": language, "stdin": stdin,
                            "env": dict(env) if env else None, "files": _files(files),
                            "timeout": timeout, "cpu_time": cpu_time, "memory_mb": memory_mb,
                            "pids": pids, "output_cap": output_cap,
                            "encoding": "base64" if binary else None}
    return {k: v for k, v in body.items() if v is not None}


def _result(d: Dict[str, Any], binary: bool, check: bool) -> CommandResult:
    r = CommandResult.from_json(d, base64_output=binary)
    if check and not r.ok:
        raise CommandExitError(r)
    return r


def _http_timeout(calls: Iterable[Dict[str, Any]], request_timeout: Optional[float]) -> float:
    if request_timeout is not None:
        return request_timeout
    return max((float(c.get("timeout", 10)) for c in calls), default=10.0) + 30.0


def _batch_results(ans: Dict[str, Any], bodies: List[Dict[str, Any]], check: bool,
                   return_exceptions: bool) -> List[Union[CommandResult, WarrenError]]:
    out: List[Union[CommandResult, WarrenError]] = []
    for d, b in zip(ans.get("results", []), bodies):
        if isinstance(d, dict) and "error" in d:
            code = d["error"].get("code")
            status = 503 if code == "unavailable" else 400 if code == "invalid_argument" else 500
            e = error_from_response(status, json.dumps(d).encode())
            if not return_exceptions:
                raise e
            out.append(e)
        else:
            out.append(_result(d, b.get("encoding") == "base64", check))
    return out


def call(image: Optional[str] = None, argv: Optional[Sequence[str]] = None, *,
         code: Optional[str] = None, language: Optional[str] = None,
         stdin: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
         files: Files = None, timeout: Optional[float] = None,
         cpu_time: Optional[float] = None, memory_mb: Optional[int] = None,
         pids: Optional[int] = None, output_cap: Optional[int] = None, binary: bool = False,
         check: bool = False, socket: Optional[str] = None, base_url: Optional[str] = None,
         api_key: Optional[str] = None,
         request_timeout: Optional[float] = None) -> CommandResult:
    """Run one call and return its result.

    Args:
        image: an image name the daemon knows (or, on the Unix socket, a path).
        argv: the command; or ``code`` with ``language="python"`` (argv then
            becomes ``sys.argv``, or names a file to run).
        stdin: text given whole on stdin; env: the call's environment;
        files: ``{path: str | bytes}`` or ``[(path, data[, mode])]`` written
            beneath the working dir (``/work``) before the call starts.
        timeout, cpu_time: seconds (defaults 10 and = timeout); memory_mb,
            pids, output_cap: limits of this call.
        binary: exact output bytes (decoded as UTF-8 with replacement here).
        check: raise :class:`CommandExitError` unless it exited 0.
    Raises:
        InvalidArgumentError: a bad field (``.field`` names it).
        UnavailableError: the zygote died under the call (retry).
    """
    body = _body(image, argv, code=code, language=language, stdin=stdin, env=env, files=files,
                 timeout=timeout, cpu_time=cpu_time, memory_mb=memory_mb, pids=pids,
                 output_cap=output_cap, binary=binary)
    cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key)
    d = SyncHTTP(cfg).json("POST", "/functions/call", json=body,
                           timeout=_http_timeout([body], request_timeout))
    return _result(d, binary, check)


def batch(calls: Iterable[Mapping[str, Any]], *, parallel: Optional[int] = None,
          check: bool = False, return_exceptions: bool = False, socket: Optional[str] = None,
          base_url: Optional[str] = None, api_key: Optional[str] = None,
          request_timeout: Optional[float] = None) -> List[Union[CommandResult, WarrenError]]:
    """Run many calls in one request, in parallel; results in order.

    Each item takes the keyword arguments of :func:`call` (``image``,
    ``argv``, ``code``, ...). A call that could not run raises its error, or
    with ``return_exceptions=True`` stands in the list in its place.
    """
    bodies = [_body(c.get("image"), c.get("argv"), code=c.get("code"),
                    language=c.get("language"), stdin=c.get("stdin"), env=c.get("env"),
                    files=c.get("files"), timeout=c.get("timeout"),
                    cpu_time=c.get("cpu_time"), memory_mb=c.get("memory_mb"),
                    pids=c.get("pids"), output_cap=c.get("output_cap"),
                    binary=bool(c.get("binary", False))) for c in calls]
    req: Dict[str, Any] = {"calls": bodies}
    if parallel is not None:
        req["parallel"] = parallel
    cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key)
    ans = SyncHTTP(cfg).json("POST", "/functions/batch", json=req,
                             timeout=_http_timeout(bodies, request_timeout))
    return _batch_results(ans, bodies, check, return_exceptions)


async def acall(image: Optional[str] = None, argv: Optional[Sequence[str]] = None, *,
                code: Optional[str] = None, language: Optional[str] = None,
                stdin: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                files: Files = None, timeout: Optional[float] = None,
                cpu_time: Optional[float] = None, memory_mb: Optional[int] = None,
                pids: Optional[int] = None, output_cap: Optional[int] = None,
                binary: bool = False, check: bool = False, socket: Optional[str] = None,
                base_url: Optional[str] = None, api_key: Optional[str] = None,
                request_timeout: Optional[float] = None) -> CommandResult:
    """:func:`call` as a coroutine."""
    body = _body(image, argv, code=code, language=language, stdin=stdin, env=env, files=files,
                 timeout=timeout, cpu_time=cpu_time, memory_mb=memory_mb, pids=pids,
                 output_cap=output_cap, binary=binary)
    cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key)
    d = await AsyncHTTP(cfg).json("POST", "/functions/call", json=body,
                                  timeout=_http_timeout([body], request_timeout))
    return _result(d, binary, check)


async def abatch(calls: Iterable[Mapping[str, Any]], *, parallel: Optional[int] = None,
                 check: bool = False, return_exceptions: bool = False,
                 socket: Optional[str] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None
                 ) -> List[Union[CommandResult, WarrenError]]:
    """:func:`batch` as a coroutine."""
    bodies = [_body(c.get("image"), c.get("argv"), code=c.get("code"),
                    language=c.get("language"), stdin=c.get("stdin"), env=c.get("env"),
                    files=c.get("files"), timeout=c.get("timeout"),
                    cpu_time=c.get("cpu_time"), memory_mb=c.get("memory_mb"),
                    pids=c.get("pids"), output_cap=c.get("output_cap"),
                    binary=bool(c.get("binary", False))) for c in calls]
    req: Dict[str, Any] = {"calls": bodies}
    if parallel is not None:
        req["parallel"] = parallel
    cfg = ConnectionConfig.resolve(socket=socket, base_url=base_url, api_key=api_key)
    ans = await AsyncHTTP(cfg).json("POST", "/functions/batch", json=req,
                                    timeout=_http_timeout(bodies, request_timeout))
    return _batch_results(ans, bodies, check, return_exceptions)
