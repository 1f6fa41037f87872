"""What a thread (a conversation of several runs) is on disk: one small record.

A thread keeps the ids of its runs in the order they joined, how many of them
are *settled* (their end is folded in), and the conversation after those: the
final context of its last completed run, already compacted by the agent's
context policy. A new run reads that one record at its start and nothing per
step; the record is written twice per run (when the run joins, when it is
settled), never per step.
"""

from __future__ import annotations

import re
import secrets
import time

import msgspec

from podium.errors import ConfigError
from podium.messages import Message

__all__ = (
    "DEFAULT_THREAD_TTL_S",
    "MAX_THREAD_ID",
    "ThreadRecord",
    "check_thread_id",
    "new_thread_id",
)

#: How long a thread nobody uses is kept (each run on it starts the period again).
DEFAULT_THREAD_TTL_S = 30 * 86_400.0
MAX_THREAD_ID = 128
#: Letters, digits and ``_ . : -``: safe in a URL path, a Redis key and a log line.
_THREAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def check_thread_id(thread_id: str) -> str:
    """``thread_id`` if it is a valid thread id, else :class:`~podium.errors.ConfigError`."""
    if not isinstance(thread_id, str) or not 1 <= len(thread_id) <= MAX_THREAD_ID:
        raise ConfigError(f"a thread id is 1 to {MAX_THREAD_ID} characters")
    if _THREAD_ID.fullmatch(thread_id) is None:
        raise ConfigError(
            "a thread id starts with a letter or digit and has only letters, digits and _ . : -"
        )
    return thread_id


def new_thread_id() -> str:
    """An unguessable thread id: ``thr_`` and 128 random bits in hex."""
    return "thr_" + secrets.token_hex(16)


class ThreadRecord(msgspec.Struct, gc=False, omit_defaults=True):
    """A conversation: its runs, and the messages a new run on it starts from.

    ``runs[:settled]`` have ended and are folded into ``history`` (a completed run
    replaces it with its final context, minus the system prompt; a failed or
    cancelled one leaves it as it was); ``runs[settled]`` is the run whose turn it
    is, the ones after it wait. ``turns`` counts the completed runs folded in.
    ``ttl_s``: the thread expires that long after its last write (None: never);
    ``expires_at`` is when. ``version`` grows with every write (optimistic
    concurrency, as for runs).
    """

    thread_id: str
    tenant: str = "default"
    created_at: float = msgspec.field(default_factory=time.time)
    updated_at: float = 0.0
    ttl_s: float | None = DEFAULT_THREAD_TTL_S
    expires_at: float | None = None
    runs: list[str] = []
    settled: int = 0
    history: list[Message] = []
    turns: int = 0
    metadata: dict[str, str] = {}
    version: int = 0

    def touch(self, now: float | None = None) -> None:
        """Mark a write: ``updated_at`` now, expiry ``ttl_s`` from now."""
        now = time.time() if now is None else now
        self.updated_at = now
        self.expires_at = None if self.ttl_s is None else now + self.ttl_s

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def pending(self) -> list[str]:
        """The runs not settled yet: the one whose turn it is first, then those waiting."""
        return self.runs[self.settled :]
