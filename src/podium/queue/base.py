"""The run-queue interface: runs waiting for a worker, claimed under a lease.

A worker ``claim``s queued runs, ``heartbeat``s while it drives them, and
``ack``s each when it has reached a terminal status. A run whose lease runs
out (its worker died) is delivered again to another worker, which resumes it
from its last checkpoint. After ``max_deliveries`` it goes to a dead-letter
list with the reason.

Implementations: :class:`~podium.queue.local.LocalQueue` (in-process, the
embedded default) and a Redis Streams queue for many workers on many machines.
"""

from __future__ import annotations

import abc

import msgspec

from podium.lifecycle import AsyncCloseable

__all__ = ("Claim", "DeadLetter", "QueueItem", "QueueStatistics", "RunQueue")


class QueueItem(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A run waiting for a worker. ``pool`` names the queue (one per resource pool).

    ``version``: the run's record version when it was submitted (as stored). A queue
    adds a versioned item only if it is above the last version submitted for the run,
    so the gateway and a sweep that finds the run stranded can both submit it and it is
    queued once, and a sweep that read the run before it moved on cannot queue it
    again. The run's last version is forgotten when the run has ended (its ack or
    dead-letter), else after :data:`VERSION_TTL_S`.
    """

    run_id: str
    agent: str
    pool: str = "default"
    tenant: str = "default"
    enqueued_at: float = 0.0
    version: int | None = None


class Claim(msgspec.Struct, gc=False):
    """A delivery of an item to one worker. ``receipt`` identifies it to ack/heartbeat.

    ``consumer`` is the worker it was delivered to (distributed queues check it
    before a release, so a worker that lost its lease cannot give the run back).
    """

    item: QueueItem
    receipt: str
    deliveries: int = 1
    claimed_at: float = 0.0
    consumer: str = ""


class DeadLetter(msgspec.Struct, frozen=True):
    """A run the queue gave up on."""

    item: QueueItem
    reason: str
    deliveries: int
    ts: float


class QueueStatistics(msgspec.Struct, frozen=True):
    pool: str
    waiting: int
    in_flight: int
    submitted: int
    acked: int
    redelivered: int
    dead_lettered: int


#: How long a run's last submitted version is remembered when its end is not seen.
VERSION_TTL_S = 7 * 24 * 3600


class RunQueue(AsyncCloseable, abc.ABC):
    """Runs waiting for workers, per pool."""

    #: The queue outlives its processes and several share it (Redis): a run its submitter
    #: stored but died before submitting is found by a worker's sweep and submitted then.
    shared: bool = False

    @property
    def leased(self) -> bool:
        """Whether a claim its worker stops heartbeating is delivered again (counted): a
        worker may leave a run it failed to drive to its lease. True unless a queue says."""
        return True

    @abc.abstractmethod
    async def submit(self, item: QueueItem) -> bool:
        """Enqueue a run (its record must already be in the store). False: the item has a
        ``version`` and the run was submitted at that version or a later one already, and
        nothing is added."""

    @abc.abstractmethod
    async def claim(
        self, consumer: str, *, pool: str = "default", count: int = 1, block_s: float = 1.0
    ) -> list[Claim]:
        """Up to ``count`` runs for ``consumer``, waiting up to ``block_s`` for one."""

    @abc.abstractmethod
    async def heartbeat(self, consumer: str, claims: list[Claim]) -> list[Claim] | None:
        """Extend the leases of runs ``consumer`` is still driving.

        Queues that can tell return the claims whose lease was lost (another
        worker took the run over); the worker stops driving those.
        """

    @abc.abstractmethod
    async def ack(self, claim: Claim, *, ended: bool = True) -> None:
        """The run is done with the queue: remove it. ``ended``: it reached a terminal
        status, so its last submitted version is forgotten; False for a run parked on a
        human, whose version is kept (it comes back at a later one, and a sweep that read
        it before must not queue the earlier one again)."""

    async def forget(self, run_id: str) -> None:
        """The run ended outside the queue (cancelled while it waited for a human, with no
        item here to ack): forget its last submitted version, as an ack would."""
        return None

    @abc.abstractmethod
    async def release(self, claim: Claim) -> None:
        """Give the run back unfinished (draining): another worker resumes it."""

    @abc.abstractmethod
    async def dead_letter(self, claim: Claim, reason: str) -> None:
        """Move the run out of the queue for good, recording why."""

    @abc.abstractmethod
    async def depth(self, pool: str = "default") -> int:
        """Runs waiting (not in flight) in ``pool``."""

    async def dead_letters(self, pool: str = "default", limit: int = 100) -> list[DeadLetter]:
        """The runs of ``pool`` the queue gave up on, oldest first."""
        raise NotImplementedError(f"{type(self).__name__} does not list its dead letters")

    async def outstanding(self, pool: str = "default") -> int:
        """Runs not yet acked: waiting or in flight anywhere (burst workers wait for zero).

        Defaults to :meth:`depth`, right for a queue whose in-flight runs all
        belong to the asking process.
        """
        return await self.depth(pool)

    async def retire(self, consumer: str, pool: str = "default") -> bool:
        """``consumer`` stops for good (a drained worker): forget its name if it holds
        nothing. Returns whether it was forgotten; a queue that keeps no names: False."""
        return False

    async def forget_idle_consumers(self, pool: str, idle_s: float) -> int:
        """Forget the consumers of ``pool`` idle ``idle_s`` or longer that hold nothing
        (workers that died: their runs were taken over). Returns how many."""
        return 0

    def statistics(self, pool: str = "default") -> QueueStatistics:
        return QueueStatistics(pool, 0, 0, 0, 0, 0, 0)

    async def aclose(self) -> None:
        """Release connections."""
