"""One holder's end of a run's journal on Redis: where its next append goes, and who waits.

Every write of one run from one :class:`~podium.store.redis.RedisRunStore`
takes a turn: one is in flight at a time, and the writes that arrive meanwhile
(the outcomes of parallel tool calls finishing together) wait in ``waiting``
and go out together as one write when the turn passes. So two appends never
compute the same stream id, and a refused write always means that another
holder advanced the run.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from podium.engine.records import JournalEntry, RunRecord

__all__ = ("PendingWrite", "RunTail")


class PendingWrite:
    """A write waiting for its run's turn; ``fut`` gets its outcome."""

    __slots__ = ("entries", "fut", "record")

    def __init__(
        self,
        entries: Sequence[JournalEntry],
        record: RunRecord | None,
        fut: asyncio.Future[None],
    ) -> None:
        self.entries = entries
        self.record = record
        self.fut = fut


class RunTail:
    """What this store knows of one run it writes.

    ``version``: the record version it holds, the fence of its journal-only
    appends (-1: not known yet, read it first). ``length``: the journal's
    length (-1: unknown because a write was interrupted: read it again).
    ``unsettled``: a record write interrupted in flight (its write counter and
    record), which may or may not have landed; the next write finds out first.
    ``fenced``: another holder advanced the run, so journal-only appends are
    refused until a record write at the current version succeeds.
    """

    __slots__ = ("busy", "fenced", "finished", "length", "unsettled", "version", "waiting")

    def __init__(self) -> None:
        self.version = -1
        self.length = -1
        self.busy = False
        self.fenced = False
        self.finished = False
        self.unsettled: tuple[int, RunRecord] | None = None
        self.waiting: deque[PendingWrite] = deque()

    @property
    def known(self) -> bool:
        """Whether an append can go out without reading where the run stands first."""
        return self.version >= 0 and self.length >= 0 and self.unsettled is None
