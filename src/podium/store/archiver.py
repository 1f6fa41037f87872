"""Moving finished runs from Redis to PostgreSQL before their Redis TTL ends.

The :class:`~podium.store.tiered.TieredRunStore` records every run it is about to
finish in ``<prefix>:archive:pending`` (a sorted set scored by when). The archiver
reads that set in batches, oldest first; for each run Redis still holds finished it
copies record and journal to PostgreSQL in one transaction per batch
(:func:`~podium.store.postgres_archive.archive_runs`, idempotent), and only then
removes the ids from the set — each only if its score is the one read, so a run marked
again meanwhile stays. Killed at any point, the next archiver (this process restarted,
or another) finds the same ids and writes them again, which changes nothing: no run is
missed and none is written twice.

A run in the set that is not finished in Redis is a finishing write still in flight
(kept), or one that failed and was never made (dropped after ``stale_s``; a later
finishing write marks it again). A run gone from Redis and absent from PostgreSQL is
lost (its TTL ended before an archiver ran: the TTL must outlast any archiver outage):
logged and counted.

One archiver works at a time across the deployment: each batch renews a lease
(``<prefix>:archive:lease``); the others wait and take over when it lapses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any

import msgspec
from redis.exceptions import RedisError

from podium.engine.records import TERMINAL_STATUSES, RunRecord
from podium.errors import RunNotFoundError, StoreError
from podium.lifecycle import stop_task
from podium.store.base import JournalItem, log_lost
from podium.store.postgres_archive import archive_runs
from podium.store.redis_keys import pending_key
from podium.store.redis_scripts import REMOVE_AT_SCORE_LUA

if TYPE_CHECKING:
    from podium.store.postgres import PostgresRunStore
    from podium.store.redis import RedisRunStore

__all__ = ("ArchiverStatistics", "RunArchiver")

log = logging.getLogger("podium.store")

# KEYS: the lease. ARGV: this archiver's token, lease ms. 1 if it holds the lease now.
_LEASE = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class ArchiverStatistics(msgspec.Struct, frozen=True):
    archived: int  # runs written to PostgreSQL (again, for a retried batch)
    lost: int  # gone from Redis before they were archived
    batches: int
    pending: int  # in the set at the last look


class RunArchiver:
    """Archives ``hot``'s finished runs into ``cold``, ``batch`` runs per transaction,
    looking every ``every_s`` (at once again after a full batch). ``settle_s``: runs
    marked less than this ago wait (their finishing write is most likely in flight)."""

    def __init__(
        self,
        hot: RedisRunStore,
        cold: PostgresRunStore,
        *,
        batch: int = 200,
        every_s: float = 1.0,
        settle_s: float = 0.5,
        stale_s: float = 600.0,
        lease_s: float = 30.0,
    ) -> None:
        self.hot = hot
        self.cold = cold
        self.batch = batch
        self.every_s = every_s
        self.settle_s = settle_s
        self.stale_s = stale_s
        self.lease_ms = int(lease_s * 1000)
        self._key = pending_key(hot.prefix)
        self._lease_key = f"{hot.prefix}:archive:lease"
        self._token = f"{os.getpid()}-{os.urandom(6).hex()}"
        self._lease = hot.client.register_script(_LEASE)
        self._done = hot.client.register_script(REMOVE_AT_SCORE_LUA)  # (pending set)
        self._task: asyncio.Task[None] | None = None
        self._turn: asyncio.Lock | None = None
        self._closed = False
        self._archived = self._lost = self._batches = self._pending = 0

    def statistics(self) -> ArchiverStatistics:
        return ArchiverStatistics(self._archived, self._lost, self._batches, self._pending)

    async def archive_once(self, *, settle_s: float | None = None) -> int:
        """One batch (if this archiver holds the lease): how many runs it archived."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:  # its loop and a drain: one batch at a time, not the same twice
            return await self._archive_batch(settle_s)

    async def _archive_batch(self, settle_s: float | None) -> int:
        if not await self._lease(keys=[self._lease_key], args=[self._token, self.lease_ms]):
            return 0
        settle = self.settle_s if settle_s is None else settle_s
        now = time.time()
        rows: list[Any] = await self.hot.client.zrangebyscore(
            self._key, "-inf", now - settle, start=0, num=self.batch, withscores=True)
        self._pending = int(await self.hot.client.zcard(self._key))
        if not rows:
            return 0
        ids = [(member.decode(), float(score)) for member, score in rows]
        found = await asyncio.gather(*(self._read(run_id) for run_id, _ in ids))
        runs: list[tuple[RunRecord, list[JournalItem]]] = []
        done: list[tuple[str, float]] = []
        for (run_id, score), got in zip(ids, found, strict=True):
            if got is None:  # not in Redis: archived already, or lost
                if await self.cold.get(run_id) is None:
                    self._lost += 1
                    log_lost(run_id, "the archive's pending set")
                done.append((run_id, score))
            elif got[0].status in TERMINAL_STATUSES:
                runs.append(got)
                done.append((run_id, score))
            elif score < now - self.stale_s:  # its finishing write was never made
                done.append((run_id, score))
        await archive_runs(self.cold, runs)
        if done:
            await self._done(keys=[self._key],
                             args=[x for run_id, score in done for x in (run_id, repr(score))])
        self._archived += len(runs)
        self._batches += 1
        return len(runs)

    async def _read(self, run_id: str) -> tuple[RunRecord, list[JournalItem]] | None:
        record = await self.hot.get(run_id)
        if record is None:
            return None
        try:
            items = await self.hot.journal(run_id)
        except RunNotFoundError:
            return None
        # The record again: a finishing write that landed between the two reads has
        # entries the first record did not name; read after the journal, it is at least
        # as new as the entries.
        again = await self.hot.get(run_id)
        return None if again is None else (again, items)

    async def drain(self) -> int:
        """Archive until a batch comes back short (tests, shutdown): how many runs."""
        total = 0
        while (n := await self.archive_once(settle_s=0)) >= self.batch:
            total += n
        return total + n

    def ensure_started(self) -> None:
        """Start the background loop in the running loop (a no-op once closed)."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._loop(), name="podium-archiver")

    async def _loop(self) -> None:
        while True:
            try:
                full = await self.archive_once() >= self.batch
            except (StoreError, RedisError, OSError) as exc:  # an outage: next time
                log.warning("runs not archived now: %s", exc)
                full = False
            except Exception as exc:  # a bug must not stop the archiving for good
                log.exception("runs not archived now: %s", exc)
                full = False
            if not full:
                await asyncio.sleep(self.every_s * (0.5 + random.random()))

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await stop_task(task)
