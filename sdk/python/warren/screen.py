"""Screen and input of a full-VM sandbox (tier ``"vm"``), for computer-use
agents: ``sb.screenshot()`` gives the screen as PNG bytes, ``sb.input``
types, presses keys and drives an absolute pointer in screen pixels."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ._http import seg

if TYPE_CHECKING:
    from .sandbox import Sandbox


def screenshot(sb: "Sandbox") -> bytes:
    return sb._http.request("GET", f"/sandboxes/{seg(sb.sandbox_id)}/screen").content


class Input:
    """Keyboard and pointer of a VM sandbox (``sb.input``)."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb

    def _send(self, body: Any) -> None:
        self._sb._http.request("POST", f"/sandboxes/{seg(self._sb.sandbox_id)}/input",
                               json=body)

    def type(self, text: str) -> None:
        """Type text on the keyboard (ASCII letters, digits, punctuation, newline)."""
        self._send({"type": "text", "text": text})

    def key(self, *keys: str) -> None:
        """Press keys together and release them: ``key("ctrl", "c")``."""
        if len(keys) == 1 and not isinstance(keys[0], str):
            keys = tuple(keys[0])  # type: ignore[arg-type]
        self._send({"type": "key", "keys": list(keys)})

    def move(self, x: int, y: int) -> None:
        """Move the pointer to pixel (x, y)."""
        self._send({"type": "move", "x": x, "y": y})

    def click(self, x: int, y: int, button: str = "left", double: bool = False) -> None:
        """Click ``button`` (left, right, middle) at pixel (x, y)."""
        self._send({"type": "click", "x": x, "y": y, "button": button, "double": double})

    def scroll(self, x: int, y: int, dy: int) -> None:
        """Turn the wheel ``dy`` steps at (x, y) (negative: up)."""
        self._send({"type": "scroll", "x": x, "y": y, "dy": dy})


__all__: Sequence[str] = ("Input", "screenshot")
