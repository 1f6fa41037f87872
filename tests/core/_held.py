"""Holding a run in a chosen phase: a store, a model and a tool that stop on an event.

``Hold(where, nth)`` stops the ``nth`` (0-based) passage through ``where`` until
the test releases it; ``HeldStore`` wraps a real store and passes each call
through its hold (before the call, or after it with the result in hand, which
is how a stale read or a write whose reply is late looks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from podium.engine.records import JournalEntry, RunRecord
from podium.store.base import JournalItem, RunStore, StoreStatistics


class Hold:
    def __init__(self, where: str = "", nth: int = 0, *, after: bool = False) -> None:
        self.where = where
        self.nth = nth
        self.after = after
        self.entered = asyncio.Event()
        self.released = asyncio.Event()
        self._seen = 0

    async def at(self, where: str) -> None:
        if where != self.where or self.entered.is_set():
            return
        if self._seen < self.nth:
            self._seen += 1
            return
        self.entered.set()
        await self.released.wait()


class HeldStore(RunStore):
    """A real store whose reads and writes pass through ``hold`` (armed by the test)."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner
        self.hold = Hold()

    async def _around(self, where: str, before: bool) -> None:
        if self.hold.after != before:
            await self.hold.at(where)

    async def create(self, record: RunRecord) -> None:
        await self.inner.create(record)

    async def get(self, run_id: str) -> RunRecord | None:
        await self._around("get", True)
        record = await self.inner.get(run_id)
        await self._around("get", False)
        return record

    async def update(self, record: RunRecord) -> None:
        await self._around("update", True)
        await self.inner.update(record)
        await self._around("update", False)

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        await self._around("append", True)
        await self.inner.append(run_id, entries, record=record)
        await self._around("append", False)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        await self._around("journal", True)
        items = await self.inner.journal(run_id, after)
        await self._around("journal", False)
        return items

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        return await self.inner.list(
            tenant=tenant, status=status, agent=agent, limit=limit, since=since, until=until
        )

    async def wait_journal(self, run_id: str, after: int, timeout: float) -> list[JournalItem]:
        return await self.inner.wait_journal(run_id, after, timeout)

    async def request_cancel(self, run_id: str) -> None:
        await self.inner.request_cancel(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        return await self.inner.cancel_requests(run_ids)

    def statistics(self) -> StoreStatistics:
        return self.inner.statistics()

    async def aclose(self) -> None:
        await self.inner.aclose()
