"""Untrusted text made fit for a human's screen: terminal-safe, clipped, thinned.

A run's input, messages, tool arguments and results, errors and names come from users,
models and tools. The views (``podium runs``, the dashboard) show them literally, so
every view passes them through here rather than escaping ad hoc:

- :func:`terminal_safe` turns control characters (ANSI escape sequences, C1 controls,
  carriage returns, bidi overrides) into visible ``\\x1b``-style escapes: a terminal
  must print them, never act on them (clear the screen, retitle the window, hide text);
- :func:`clip` cuts a long text and says how much was cut;
- :func:`keep_ends` keeps the first and last items of a long list and says how many
  were left out between them.

Markup escaping (HTML, rich) is not done here: each renderer does its own (the
dashboard sets ``textContent``, ``podium runs`` builds ``rich.text.Text``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ("clip", "keep_ends", "terminal_safe")

T = TypeVar("T")

# C0 controls but tab and newline, DEL and C1 (0x9b alone is a CSI on many terminals),
# and the bidi embeddings, overrides and isolates that reorder what is shown.
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F),
             *range(0x2066, 0x206A)]
_VISIBLE = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROLS
            if c not in (0x09, 0x0A)}
_ONE_LINE = {**_VISIBLE, 0x0A: "\\n"}


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b``),
    tabs and newlines kept unless ``one_line``: ESC ``[2J`` prints as ``\\x1b[2J``
    and clears nothing."""
    return text.translate(_ONE_LINE if one_line else _VISIBLE)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with a marker that says how many more
    there were (a reader must never take a cut text for the whole)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def keep_ends(items: Sequence[T], limit: int) -> tuple[list[T], list[T], int]:
    """The first and last ``limit // 2`` items of a longer sequence and how many were left
    out between them; all of them (and 0) when there are at most ``limit``."""
    if len(items) <= limit:
        return list(items), [], 0
    head = limit // 2
    tail = limit - head
    return list(items[:head]), list(items[len(items) - tail:]), len(items) - limit
