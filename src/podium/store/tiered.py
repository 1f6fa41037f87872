"""Redis for the hot runs, PostgreSQL for their history: one store to every reader.

Example::

    store = TieredRunStore(RedisRunStore("redis://redis:6379/0"),
                           PostgresRunStore("postgresql://podium@db/podium"))

Every write goes to Redis, as with a :class:`~podium.store.redis.RedisRunStore` alone;
a write that finishes a run first records the run in a sorted set of runs to archive
(``<prefix>:archive:pending``, scored by when), so a crash between the two leaves the
run there rather than forgotten. The :class:`~podium.store.archiver.RunArchiver` (which
this store starts when ``archive=True``) copies finished runs — record and journal,
the profile in both — to PostgreSQL before their Redis TTL ends.

Reads look in Redis first and fall through to PostgreSQL on a miss (a run that has
expired from Redis, or was never there), so ``GET /v1/runs/{id}``, its events,
``podium runs`` and the dashboard find an archived run as if it were hot. Listings ask
both and merge them (the Redis copy wins while there is one).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import RunNotFoundError
from podium.memory.item import MemoryItem
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.redis_keys import pending_key
from podium.threads.record import ThreadRecord

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from podium.store.archiver import RunArchiver
    from podium.store.postgres import PostgresRunStore
    from podium.store.redis import RedisRunStore

__all__ = ("TieredRunStore", "pending_key")


class TieredRunStore(RunStore):
    """A :class:`RedisRunStore` (``hot``) whose finished runs live on in a
    :class:`PostgresRunStore` (``archive``). ``archive=True``: this process runs a
    :class:`~podium.store.archiver.RunArchiver` too (one at a time works across the
    deployment: it holds a lease in Redis); ``False`` for a store that only reads
    (``podium runs``)."""

    def __init__(
        self,
        hot: RedisRunStore,
        archive: PostgresRunStore,
        *,
        archiver: bool = True,
        archive_batch: int = 200,
    ) -> None:
        self.hot = hot
        self.archive = archive
        self.client: aioredis.Redis = hot.client  # the token channel shares it (gateway)
        self.prefix = hot.prefix
        self._pending = pending_key(hot.prefix)
        self.archiver: RunArchiver | None = None
        if archiver:
            from podium.store.archiver import RunArchiver

            self.archiver = RunArchiver(hot, archive, batch=archive_batch)

    async def _mark(self, record: RunRecord | None) -> None:
        """Before a write that finishes the run: it goes in the set the archiver reads
        (written first, so a crash after the write cannot leave it out)."""
        if record is None or record.status not in TERMINAL_STATUSES:
            return
        from podium.store.redis import translate_errors

        async with translate_errors():  # on the store's one pipelined connection
            await self.hot._pipe.execute("ZADD", self._pending, repr(time.time()), record.run_id)
        if self.archiver is not None:
            self.archiver.ensure_started()

    # -- writes: Redis ----------------------------------------------------------------------

    async def create(self, record: RunRecord) -> None:
        await self._mark(record)
        await self.hot.create(record)

    async def update(self, record: RunRecord) -> None:
        await self._mark(record)
        await self.hot.update(record)

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> int | None:
        await self._mark(record)
        await self.hot.append(run_id, entries, record=record)
        return None

    async def request_cancel(self, run_id: str) -> None:
        await self.hot.request_cancel(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        return await self.hot.cancel_requests(run_ids)

    # -- reads: Redis, then PostgreSQL --------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord | None:
        record = await self.hot.get(run_id)
        if record is None:
            record = await self.archive.get(run_id)
        return record

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        try:
            return await self.hot.journal(run_id, after)
        except RunNotFoundError:
            return await self.archive.journal(run_id, after)

    async def wait_journal(
        self, run_id: str, after: int, timeout: float
    ) -> builtins.list[JournalItem]:
        try:
            return await self.hot.wait_journal(run_id, after, timeout)
        except RunNotFoundError:  # archived runs are finished: nothing more will come
            return await self.archive.journal(run_id, after)

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
        hot = await self.hot.list(tenant=tenant, status=status, agent=agent, limit=limit,
                                  since=since, until=until)
        if status is not None and status not in TERMINAL_STATUSES:
            return hot  # only finished runs are archived
        cold = await self.archive.list(tenant=tenant, status=status, agent=agent, limit=limit,
                                       since=since, until=until)
        seen = {r.run_id for r in hot}
        merged = hot + [r for r in cold if r.run_id not in seen]
        merged.sort(key=lambda r: r.created_at, reverse=True)
        return merged[: max(limit, 0)]

    # -- threads and memories: Redis, as without an archive ----------------------------------

    async def create_thread(self, thread: ThreadRecord) -> None:
        await self.hot.create_thread(thread)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return await self.hot.get_thread(thread_id)

    async def update_thread(self, thread: ThreadRecord) -> None:
        await self.hot.update_thread(thread)

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        return await self.hot.list_threads(tenant=tenant, limit=limit)

    async def delete_thread(self, thread_id: str) -> bool:
        return await self.hot.delete_thread(thread_id)

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        await self.hot.put_memory(namespace, item)

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        return await self.hot.list_memories(namespace, limit)

    async def delete_memory(self, namespace: str, key: str) -> bool:
        return await self.hot.delete_memory(namespace, key)

    # -- the rest: Redis's, with PostgreSQL's health beside it ----------------------------

    def statistics(self) -> StoreStatistics:
        return self.hot.statistics()

    def report_lost(self, run_id: str, where: str) -> None:
        self.hot.report_lost(run_id, where)

    async def unsubmitted(self, before: float, limit: int) -> builtins.list[RunRecord]:
        return await self.hot.unsubmitted(before, limit)

    async def forget_unsubmitted(self, records: Sequence[RunRecord]) -> None:
        await self.hot.forget_unsubmitted(records)

    def problem(self) -> str | None:
        return self.hot.problem() or self.archive.problem()

    async def health(self) -> str | None:
        """Redis's problem, else PostgreSQL's: a store whose archive is down still takes
        runs, but their history is at risk once Redis's TTL ends, so it is not ready."""
        return await self.hot.health() or await self.archive.health()

    async def aclose(self) -> None:
        try:
            if self.archiver is not None:
                await self.archiver.aclose()
        finally:
            try:
                await self.hot.aclose()
            finally:
                await self.archive.aclose()
