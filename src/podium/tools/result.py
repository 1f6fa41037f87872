"""The outcome of one tool call: a leaf module so that run records, the screen and the
executor share it without importing each other."""

from __future__ import annotations

import msgspec

from podium.security.verdict import ScreenVerdict

__all__ = ("ToolResult",)


class ToolResult(msgspec.Struct, gc=False, omit_defaults=True):
    """The outcome of one tool call. ``error`` names the failure kind when ``ok`` is false:
    ``timeout``, ``exception``, ``invalid_arguments``, ``unknown_tool``, ``circuit_open``,
    ``unserializable``, ``cancelled``, ``blocked`` (withheld by the injection screen),
    ``interrupted`` (the tool raised :class:`~podium.errors.Interrupt`: ``content`` is its
    question, and the run waits for a human's answer)."""

    call_id: str
    name: str
    content: str
    ok: bool = True
    error: str | None = None
    attempts: int = 1
    wall_ns: int = 0
    cpu_ns: int = 0
    #: Time the call's slices held the loop without running (``time.sleep`` in an async
    #: tool): neither CPU nor waiting.
    blocked_ns: int = 0
    #: The injection screen's verdict on ``content`` (only when the agent screens results).
    screen: ScreenVerdict | None = None
