"""Incremental NDJSON decoding, tolerant of lines split across chunks."""
from __future__ import annotations

import json
from typing import Any, List

from .exceptions import WarrenError


class NDJSONDecoder:
    """Feed raw bytes as they arrive; get back every complete JSON line.

    Lines are split on ``\\n`` *before* UTF-8 decoding, so a multi-byte
    character cut by a chunk boundary is reassembled. Blank lines are ignored
    (so are ``\\r\\n`` line ends). :meth:`close` parses a final line that has no
    terminating newline.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline

    def feed(self, chunk: bytes) -> List[Any]:
        self._buf += chunk
        out: List[Any] = []
        start = 0
        while True:
            i = self._buf.find(b"\n", max(start, self._scanned))
            if i < 0:
                break
            self._parse(self._buf[start:i], out)
            start = i + 1
            self._scanned = start
        if start:
            del self._buf[:start]
        self._scanned = len(self._buf)
        return out

    def close(self) -> List[Any]:
        out: List[Any] = []
        if self._buf:
            self._parse(self._buf, out)
            self._buf = bytearray()
            self._scanned = 0
        return out

    @staticmethod
    def _parse(line: bytes | bytearray, out: List[Any]) -> None:
        line = bytes(line).strip()
        if not line:
            return
        try:
            out.append(json.loads(line.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as e:
            raise WarrenError(f"malformed NDJSON line from the daemon: {line[:200]!r}",
                              code="bad_response") from e
