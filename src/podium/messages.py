"""The messages of a conversation, as typed structs.

These flow through the hot path of every step, so they are ``gc=False``
structs: the cyclic garbage collector never scans them, however many
thousands of sessions hold them (DESIGN.md, "Rules the code keeps").
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ("Message", "Role", "ToolCall", "Usage")

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One tool call as the model wrote it; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"


class Message(msgspec.Struct, gc=False, omit_defaults=True):
    """One message of the context.

    ``tokens`` caches the message's token count (set once, when the message
    enters a context), so budgets never re-tokenize history. ``reasoning`` is
    an assistant's reasoning text (``reasoning_content``): journaled with the
    turn, never sent back to the model.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    tokens: int = 0
    reasoning: str = ""


class Usage(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Token usage reported by a backend (or estimated by the simulated one)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.requests + other.requests,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
