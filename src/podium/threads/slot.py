"""The worker slot a run holds, lent back while the run waits for its turn on a thread.

A run waiting for its turn is admission, not work: it must not keep a worker
slot. If it did, runs queued behind a run parked on a human (``waiting``, which
holds no slot) could fill every slot of a worker, and the parked run, once a
human decides and it is queued again, would find no slot: the thread, and the
whole pool, would stall for good. The worker drives each run in its own task
and puts the run's :class:`TurnSlot` in :data:`current_slot`; the thread keeper
lends it while it waits and takes it back when the turn comes. Without a worker
(``engine.run``) there is no slot and nothing to lend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar

__all__ = ("TurnSlot", "current_slot")


class TurnSlot:
    """One slot of a worker's ``asyncio.Semaphore``, held by one run's drive.

    ``on_change(+1 | -1)`` tells the worker how many slots its runs have lent (it
    claims as many runs as it has free slots, and a lent one is free).
    """

    __slots__ = ("_on_change", "_slots", "held")

    def __init__(
        self, slots: asyncio.Semaphore, on_change: Callable[[int], None] | None = None
    ) -> None:
        self._slots = slots
        self._on_change = on_change
        self.held = True

    def lend(self) -> None:
        """Give the slot back to the worker while the run waits (again: no change)."""
        if self.held:
            self.held = False
            self._slots.release()
            if self._on_change is not None:
                self._on_change(1)

    async def take_back(self) -> None:
        """Wait for a free slot and hold it again. Cancelled while waiting, the run holds
        none, so :meth:`release` then has nothing to give back."""
        if not self.held:
            await self._slots.acquire()
            self.held = True
            if self._on_change is not None:
                self._on_change(-1)

    def release(self) -> None:
        """The run's drive is over: free the slot if it holds one."""
        if self.held:
            self.held = False
            self._slots.release()
        elif self._on_change is not None:
            self._on_change(-1)  # a slot lent and never taken back: no longer counted as lent


#: The slot of the run driven by the current task (set by the worker), or None.
current_slot: ContextVar[TurnSlot | None] = ContextVar("podium_turn_slot", default=None)
