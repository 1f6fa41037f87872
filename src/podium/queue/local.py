"""The in-process queue: the embedded default (one process, no services).

Inside one process a worker that dies takes the process with it, so by
default claims have no lease (``lease_s=None``): what the queue held when the
process ended is found again in the store by the next embedded server, as runs
left ``queued`` or ``running`` (see :mod:`podium.queue.stranded`). With
``lease_s`` set, claims behave as on Redis: a claim not heartbeaten for
``lease_s`` is delivered again (counted) to the next claimer, and its old
holder's heartbeat reports it lost.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict, deque

import msgspec

from podium.queue.base import Claim, DeadLetter, QueueItem, QueueStatistics, RunQueue

__all__ = ("LocalQueue",)

#: How many runs' last submitted versions the in-process queue remembers.
_VERSIONS_KEPT = 100_000


class _Pool:
    __slots__ = (
        "acked", "dead", "in_flight", "items", "leases", "redelivered", "submitted", "wakeup"
    )

    def __init__(self) -> None:
        self.items: deque[Claim] = deque()
        self.in_flight: dict[str, Claim] = {}
        self.leases: dict[str, float] = {}  # receipt -> monotonic expiry (with lease_s)
        self.wakeup = asyncio.Event()
        self.submitted = self.acked = self.redelivered = 0
        self.dead: list[DeadLetter] = []


class LocalQueue(RunQueue):
    """FIFO per pool, in memory."""

    def __init__(self, *, lease_s: float | None = None) -> None:
        self.lease_s = lease_s
        self._pools: dict[str, _Pool] = {}
        self._receipts = itertools.count(1)
        self._versions: OrderedDict[str, int] = OrderedDict()  # run -> last submitted

    @property
    def leased(self) -> bool:
        return self.lease_s is not None

    async def forget(self, run_id: str) -> None:
        self._versions.pop(run_id, None)

    def _pool(self, name: str) -> _Pool:
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = _Pool()
        return pool

    async def submit(self, item: QueueItem) -> bool:
        if item.version is not None:
            last = self._versions.get(item.run_id)
            if last is not None and last >= item.version:
                return False
            self._versions[item.run_id] = item.version
            self._versions.move_to_end(item.run_id)
            if len(self._versions) > _VERSIONS_KEPT:  # the oldest go (runs parked, mostly)
                self._versions.popitem(last=False)
        if not item.enqueued_at:
            item = msgspec.structs.replace(item, enqueued_at=time.time())
        pool = self._pool(item.pool)
        pool.items.append(Claim(item, str(next(self._receipts))))
        pool.submitted += 1
        pool.wakeup.set()
        return True

    async def claim(
        self, consumer: str, *, pool: str = "default", count: int = 1, block_s: float = 1.0
    ) -> list[Claim]:
        p = self._pool(pool)
        deadline = time.monotonic() + max(block_s, 0.0)
        while True:
            claims = self._take(p, consumer, count)
            left = deadline - time.monotonic()
            if claims or left <= 0:
                return claims
            if p.leases:  # wake up for the next lease to run out, too
                left = min(left, max(0.0, min(p.leases.values()) - time.monotonic()) + 0.001)
            p.wakeup.clear()
            try:
                async with asyncio.timeout(left):
                    await p.wakeup.wait()
            except TimeoutError:
                pass

    def _take(self, p: _Pool, consumer: str, count: int) -> list[Claim]:
        now, mono = time.time(), time.monotonic()
        claims: list[Claim] = []
        if p.leases:  # runs whose holder stopped heartbeating first, counted as deliveries
            for receipt, expiry in list(p.leases.items()):
                if len(claims) >= count:
                    break
                if expiry <= mono:
                    old = p.in_flight[receipt]
                    claim = Claim(old.item, receipt, old.deliveries + 1, now, consumer)
                    p.in_flight[receipt] = claim
                    p.leases[receipt] = mono + (self.lease_s or 0.0)
                    p.redelivered += 1
                    claims.append(claim)
        while p.items and len(claims) < count:
            claim = p.items.popleft()
            claim.claimed_at = now
            claim.consumer = consumer
            p.in_flight[claim.receipt] = claim
            if self.lease_s is not None:
                p.leases[claim.receipt] = mono + self.lease_s
            claims.append(claim)
        return claims

    def _owned(self, p: _Pool, consumer: str, claim: Claim) -> bool:
        held = p.in_flight.get(claim.receipt)
        return held is not None and held.consumer == consumer

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> list[Claim]:
        """Extend ``consumer``'s leases; returns the claims it no longer holds."""
        lost: list[Claim] = []
        mono = time.monotonic()
        for claim in claims:
            p = self._pool(claim.item.pool)
            if not self._owned(p, consumer, claim):
                lost.append(claim)
            elif self.lease_s is not None:
                p.leases[claim.receipt] = mono + self.lease_s
        return lost

    async def ack(self, claim: Claim, *, ended: bool = True) -> None:
        p = self._pool(claim.item.pool)
        p.leases.pop(claim.receipt, None)
        if p.in_flight.pop(claim.receipt, None) is not None:
            p.acked += 1
        if ended:
            self._versions.pop(claim.item.run_id, None)

    async def release(self, claim: Claim) -> None:
        """Give the run back now, uncounted; only its current holder can."""
        p = self._pool(claim.item.pool)
        if not self._owned(p, claim.consumer, claim):
            return
        held = p.in_flight.pop(claim.receipt)
        p.leases.pop(claim.receipt, None)
        p.items.appendleft(Claim(held.item, held.receipt, held.deliveries))
        p.redelivered += 1
        p.wakeup.set()

    async def dead_letter(self, claim: Claim, reason: str) -> None:
        p = self._pool(claim.item.pool)
        p.in_flight.pop(claim.receipt, None)
        p.leases.pop(claim.receipt, None)
        p.dead.append(DeadLetter(claim.item, reason, claim.deliveries, time.time()))
        self._versions.pop(claim.item.run_id, None)

    async def dead_letters(self, pool: str = "default", limit: int = 100) -> list[DeadLetter]:
        return self._pool(pool).dead[:limit]

    async def depth(self, pool: str = "default") -> int:
        return len(self._pool(pool).items)

    async def outstanding(self, pool: str = "default") -> int:
        """Runs not yet acked: waiting, or claimed and still in flight."""
        p = self._pool(pool)
        return len(p.items) + len(p.in_flight)

    def statistics(self, pool: str = "default") -> QueueStatistics:
        p = self._pool(pool)
        return QueueStatistics(
            pool, len(p.items), len(p.in_flight), p.submitted, p.acked, p.redelivered, len(p.dead)
        )
