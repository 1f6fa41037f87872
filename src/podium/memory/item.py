"""One remembered thing, as every long-term memory stores it."""

from __future__ import annotations

import time

import msgspec

__all__ = ("MemoryItem",)


class MemoryItem(msgspec.Struct, gc=False, omit_defaults=True):
    """A piece of text kept under ``key`` in a namespace (a user, a tenant, an agent).

    Putting an item with a key that exists replaces it, so a tool call repeated after a
    crash (same idempotency key) leaves one item, not two.
    """

    key: str
    text: str
    created_at: float = msgspec.field(default_factory=time.time)
    metadata: dict[str, str] = {}
