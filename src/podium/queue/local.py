"""The in-process queue: the embedded default (one process, no services).

No leases are needed inside one process: a worker that dies takes the
process with it. A run claimed but not acked when the process restarts is
found again by its ``running`` status in the store.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque

from podium.queue.base import Claim, QueueItem, QueueStatistics, RunQueue

__all__ = ("LocalQueue",)


class _Pool:
    __slots__ = ("acked", "dead", "in_flight", "items", "redelivered", "submitted", "wakeup")

    def __init__(self) -> None:
        self.items: deque[Claim] = deque()
        self.in_flight: dict[str, Claim] = {}
        self.wakeup = asyncio.Event()
        self.submitted = self.acked = self.redelivered = 0
        self.dead: list[tuple[QueueItem, str]] = []


class LocalQueue(RunQueue):
    """FIFO per pool, in memory."""

    def __init__(self) -> None:
        self._pools: dict[str, _Pool] = {}
        self._receipts = itertools.count(1)

    def _pool(self, name: str) -> _Pool:
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = _Pool()
        return pool

    async def submit(self, item: QueueItem) -> None:
        if not item.enqueued_at:
            item = QueueItem(item.run_id, item.agent, item.pool, item.tenant, time.time())
        pool = self._pool(item.pool)
        pool.items.append(Claim(item, str(next(self._receipts))))
        pool.submitted += 1
        pool.wakeup.set()

    async def claim(
        self, consumer: str, *, pool: str = "default", count: int = 1, block_s: float = 1.0
    ) -> list[Claim]:
        p = self._pool(pool)
        if not p.items and block_s > 0:
            p.wakeup.clear()
            try:
                async with asyncio.timeout(block_s):
                    await p.wakeup.wait()
            except TimeoutError:
                return []
        claims: list[Claim] = []
        now = time.time()
        while p.items and len(claims) < count:
            claim = p.items.popleft()
            claim.claimed_at = now
            p.in_flight[claim.receipt] = claim
            claims.append(claim)
        return claims

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> None:
        return None

    async def ack(self, claim: Claim) -> None:
        p = self._pool(claim.item.pool)
        if p.in_flight.pop(claim.receipt, None) is not None:
            p.acked += 1

    async def release(self, claim: Claim) -> None:
        p = self._pool(claim.item.pool)
        if p.in_flight.pop(claim.receipt, None) is not None:
            claim.deliveries += 1
            p.redelivered += 1
            p.items.appendleft(claim)
            p.wakeup.set()

    async def dead_letter(self, claim: Claim, reason: str) -> None:
        p = self._pool(claim.item.pool)
        p.in_flight.pop(claim.receipt, None)
        p.dead.append((claim.item, reason))

    async def depth(self, pool: str = "default") -> int:
        return len(self._pool(pool).items)

    def dead_letters(self, pool: str = "default") -> list[tuple[QueueItem, str]]:
        return list(self._pool(pool).dead)

    def statistics(self, pool: str = "default") -> QueueStatistics:
        p = self._pool(pool)
        return QueueStatistics(
            pool, len(p.items), len(p.in_flight), p.submitted, p.acked, p.redelivered, len(p.dead)
        )
