"""A run store on PostgreSQL: durable history that many machines share.

Install with ``pip install 'podium[postgres]'`` (asyncpg). Example::

    async with PostgresRunStore("postgresql://podium@db:5432/podium") as store:
        async with Engine(store) as engine:
            await engine.run(agent, "hello")

One round trip per checkpoint: an append is one statement that bumps the run's row
(its next journal sequence number, and its record when given, fenced by version), inserts
the entries after it and notifies ``podium_journal`` — atomic, like any statement, and
heard by followers only once committed. A run's writes from one store are applied in the
order they were made (a chain per run), as the SQLite store applies its queue: a
holder's concurrent appends never overtake one another and so never fence each other.

Fencing as in every store: a record write whose version is not the stored one is
:class:`~podium.errors.StaleRunError`, and so is a journal-only append from a store whose
record write was overtaken by another holder's.

Outages: a write whose connection died (the server restarted, its backend terminated)
asks, on a new connection, whether it landed (each write leaves a token in the run's
row) before trying again, so nothing is written twice; reads are simply retried. Both
give up after ``unavailable_s`` with :class:`~podium.errors.StoreUnavailableError`.
``statement_timeout_s`` bounds every statement on the server (30 s, or the URL's
``?statement_timeout=5s``): one held up by a lock is cancelled by the server and,
being an outage, retried like the others. Finished runs expire
after ``finished_ttl_s`` if it is set (None: kept until deleted).
"""


from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import RunNotFoundError, StaleRunError, StoreError
from podium.store.base import JournalItem, StoreStatistics
from podium.store.listing import dollar, list_runs_sql
from podium.store.postgres_listen import CHANNEL
from podium.store.postgres_memories import PostgresMemories
from podium.store.postgres_pool import LIVE as _LIVE
from podium.store.postgres_pool import NOT_LANDED as _NOT_LANDED
from podium.store.postgres_threads import PostgresThreads

if TYPE_CHECKING:
    import asyncpg

__all__ = ("PostgresRunStore",)

T = TypeVar("T")

_PURGE_EVERY_S = 1.0
_PURGE_BATCH = 1000
_MAX_SEQ = 2**63 - 1


# An append: the run's row gives the entries their sequence numbers (fenced by the
# version this store holds, if any), the entries follow, and followers are told.
_APPEND = f"""
WITH r AS (
    UPDATE podium_runs SET next_seq = next_seq + cardinality($2::bytea[]), last_write = $3
    WHERE run_id = $1 AND ($4::bigint IS NULL OR version = $4)
    RETURNING next_seq - cardinality($2::bytea[]) AS first
), j AS (
    INSERT INTO podium_journal (run_id, seq, data)
    SELECT $1, r.first + e.i - 1, e.data FROM r, unnest($2::bytea[]) WITH ORDINALITY AS e(data, i)
)
SELECT first, pg_notify('{CHANNEL}', $1)::text FROM r
"""
# The same, with the record written in the same statement (fenced by its version).
_APPEND_RECORD = f"""
WITH r AS (
    UPDATE podium_runs SET next_seq = next_seq + cardinality($2::bytea[]), last_write = $3,
        version = $4 + 1, status = $5, record = $6, expires_at = $7
    WHERE run_id = $1 AND version = $4
    RETURNING next_seq - cardinality($2::bytea[]) AS first
), j AS (
    INSERT INTO podium_journal (run_id, seq, data)
    SELECT $1, r.first + e.i - 1, e.data FROM r, unnest($2::bytea[]) WITH ORDINALITY AS e(data, i)
)
SELECT first, pg_notify('{CHANNEL}', $1)::text FROM r
"""
_UPDATE = """
UPDATE podium_runs SET version = $2 + 1, status = $3, record = $4, expires_at = $5,
    last_write = $6
WHERE run_id = $1 AND version = $2
"""
_PURGE = f"""
WITH gone AS (
    DELETE FROM podium_runs WHERE run_id IN (
        SELECT run_id FROM podium_runs WHERE expires_at <= $1 LIMIT {_PURGE_BATCH})
    RETURNING run_id
), j AS (
    DELETE FROM podium_journal WHERE run_id IN (SELECT run_id FROM gone)
), c AS (
    DELETE FROM podium_cancels WHERE run_id IN (SELECT run_id FROM gone)
), t AS (
    DELETE FROM podium_threads WHERE thread_id IN (
        SELECT thread_id FROM podium_threads WHERE expires_at <= $1 LIMIT {_PURGE_BATCH})
)
SELECT count(*) FROM gone
"""



class PostgresRunStore(PostgresThreads, PostgresMemories):
    """Runs, journals, threads and memories in PostgreSQL tables (``podium_*``).

    ``dsn``: a ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`` URL. ``max_connections``:
    the pool's bound. ``unavailable_s``: how long a call waits out an outage (retrying)
    before :class:`~podium.errors.StoreUnavailableError`. ``create_schema``: create the
    tables on a database without them (else ``podium db upgrade`` must have).
    ``schema``: the PostgreSQL schema the tables live in (created if missing; None: the
    database's default search path, ``public``): several deployments in one database.
    ``synchronous_commit=False``: a write is acknowledged before the server has flushed
    it to its WAL (several times the checkpoints per second on one disk; a crash of the
    server, not of Podium, may lose its last fraction of a second of writes).
    """

    # Another process's appends wake us through LISTEN; this is the fallback poll for a
    # listener that is down (and the gap before it is up again).
    _notify_poll_s = 1.0

    def _in_order(self, run_id: str, write: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """``write`` applied after this store's earlier writes to the run (made before this
        call): a task, shielded from its caller's cancellation as a queued SQLite op is."""
        before = self._tails.get(run_id)

        async def chained() -> T:
            if before is not None:
                await asyncio.wait([before])  # its outcome is its caller's, not ours
            return await write()

        task = asyncio.get_running_loop().create_task(chained())
        self._tails[run_id] = task

        def done(t: asyncio.Task[T]) -> None:
            if self._tails.get(run_id) is t:
                del self._tails[run_id]
            if not t.cancelled():
                t.exception()  # retrieved: a cancelled caller does not leave it unheard

        task.add_done_callback(done)
        return task

    def _expiry(self, status: str) -> float | None:
        if status in TERMINAL_STATUSES and self.finished_ttl_s is not None:
            return time.time() + self.finished_ttl_s
        return None

    def _hold(self, run_id: str, status: str, version: int) -> None:
        if status in TERMINAL_STATUSES:
            self._held.pop(run_id, None)
        else:
            self._held[run_id] = version

    async def _refused(self, conn: asyncpg.Connection, run_id: str, expected: int | None) -> None:
        """Why a fenced write matched no row: the run is gone, or another holder moved on."""
        version = await conn.fetchval("SELECT version FROM podium_runs WHERE run_id = $1", run_id)
        if version is None:
            raise RunNotFoundError(run_id)
        raise StaleRunError(f"{run_id} is at version {version}, this writer holds {expected}")

    def _landed(self, run_id: str, token: bytes) -> Callable[[asyncpg.Connection], Awaitable[Any]]:
        async def check(conn: asyncpg.Connection) -> Any:
            mine = await conn.fetchval(
                "SELECT last_write = $2 FROM podium_runs WHERE run_id = $1", run_id, token
            )
            return None if mine else _NOT_LANDED

        return check

    def _maybe_purge(self) -> None:
        """Expired runs are deleted in the background, at most once a second."""
        if self.finished_ttl_s is None:
            return
        now = time.monotonic()
        if now < self._next_purge or (self._purging is not None and not self._purging.done()):
            return
        self._next_purge = now + _PURGE_EVERY_S
        self._purging = asyncio.get_running_loop().create_task(self._purge())

    async def _purge(self) -> None:
        async def op(conn: asyncpg.Connection) -> None:
            await conn.fetchval(_PURGE, time.time())

        with contextlib.suppress(StoreError):  # the next write tries again
            await self._call(op)

    # -- RunStore ---------------------------------------------------------------------------

    async def create(self, record: RunRecord) -> None:
        import asyncpg

        record.updated_at = record.updated_at or record.created_at
        blob = self._encoder.encode(record)
        args = (record.run_id, record.tenant, record.agent, record.status, record.created_at,
                record.version, blob, self._expiry(record.status) if record.done else None)

        async def op(conn: asyncpg.Connection) -> None:
            try:
                await conn.execute(
                    "INSERT INTO podium_runs (run_id, tenant, agent, status, created_at,"
                    " version, record, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    *args,
                )
            except asyncpg.UniqueViolationError:
                raise StoreError(f"run {record.run_id} exists") from None

        async def landed(conn: asyncpg.Connection) -> Any:
            stored = await conn.fetchval(
                "SELECT record FROM podium_runs WHERE run_id = $1", record.run_id)
            return None if stored == blob else _NOT_LANDED

        await self._call(op, landed)

    async def get(self, run_id: str) -> RunRecord | None:
        async def op(conn: asyncpg.Connection) -> bytes | None:
            blob: bytes | None = await conn.fetchval(
                f"SELECT record FROM podium_runs WHERE run_id = $1 AND {_LIVE % 2}",
                run_id, time.time(),
            )
            return blob

        blob = await self._call(op)
        return None if blob is None else self._record_decoder.decode(blob)

    async def update(self, record: RunRecord) -> None:
        expected = record.version
        record.version += 1
        record.updated_at = time.time()
        blob = self._encoder.encode(record)
        run_id, status = record.run_id, record.status
        token = os.urandom(8)

        async def op(conn: asyncpg.Connection) -> None:
            done = await conn.execute(
                _UPDATE, run_id, expected, status, blob, self._expiry(status), token
            )
            if done == "UPDATE 0":
                await self._refused(conn, run_id, expected)

        async def write() -> None:
            await self._call(op, self._landed(run_id, token))
            self._hold(run_id, status, expected + 1)

        try:
            await asyncio.shield(self._in_order(run_id, write))
        except asyncio.CancelledError:
            raise  # the write goes on, in order: the caller's version is right
        except BaseException:
            record.version = expected  # a refused write leaves the caller's version alone
            raise
        self._maybe_purge()

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        encode = self._encoder.encode
        datas = [encode(entry) for entry in entries]
        token = os.urandom(8)
        expected: int | None = None
        if record is not None:
            expected, status = record.version, record.status
            record.version += 1
            record.updated_at = entries[-1].ts if entries else record.updated_at
            blob = encode(record)

        async def op(conn: asyncpg.Connection) -> None:
            if record is not None:
                row = await conn.fetchrow(
                    _APPEND_RECORD, run_id, datas, token, expected, status, blob,
                    self._expiry(status),
                )
                fence = expected
            else:
                fence = self._held.get(run_id)
                row = await conn.fetchrow(_APPEND, run_id, datas, token, fence)
            if row is None:
                await self._refused(conn, run_id, fence)

        async def write() -> None:
            await self._call(op, self._landed(run_id, token))
            if record is not None:
                self._hold(run_id, status, expected + 1)  # type: ignore[operator]

        try:
            await asyncio.shield(self._in_order(run_id, write))
        except asyncio.CancelledError:
            raise  # the write goes on, in order: the caller's version is right
        except BaseException:
            if record is not None and expected is not None:
                record.version = expected
            raise
        self._appends += 1
        self._entries += len(datas)
        self._bytes += sum(map(len, datas))
        if self._notifier is not None:
            self._notifier.notify(run_id)  # this process's readers, without the round trip
        self._maybe_purge()

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        # One statement (one snapshot): no row, the run is not there; a row without an
        # entry, it has none after ``after``.
        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT j.seq, j.data FROM podium_runs AS r LEFT JOIN podium_journal AS j"
                " ON j.run_id = r.run_id AND j.seq > $2"
                f" WHERE r.run_id = $1 AND {_LIVE.replace('expires_at', 'r.expires_at') % 3}"
                " ORDER BY j.seq",
                run_id, max(-1, min(after, _MAX_SEQ)), time.time(),
            )
            return rows

        rows = await self._call(op)
        if not rows:
            raise RunNotFoundError(run_id)
        decode = self._entry_decoder.decode
        return [(row[0], decode(row[1])) for row in rows if row[0] is not None]

    async def wait_journal(
        self, run_id: str, after: int, timeout: float
    ) -> builtins.list[JournalItem]:
        """As every store's; woken by LISTEN/NOTIFY, polling while the listener is down."""
        if not self._closed:
            await self._listener.ensure()
        return await super().wait_journal(run_id, after, timeout)

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
        sql, params = list_runs_sql("podium_runs", dollar, tenant=tenant, status=status,
                                    agent=agent, since=since, until=until, now=time.time(),
                                    limit=limit)

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *params)
            return rows

        decode = self._record_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def request_cancel(self, run_id: str) -> None:
        """Leave the request in the database, where every process (and a restart) sees it."""

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "INSERT INTO podium_cancels VALUES ($1, $2)"
                " ON CONFLICT (run_id) DO UPDATE SET at = EXCLUDED.at",
                run_id, time.time(),
            )

        await self._call(op)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        if not run_ids:
            return set()
        ids = list(run_ids)

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT run_id FROM podium_cancels WHERE run_id = ANY($1::text[])", ids
            )
            return rows

        return {row[0] for row in await self._call(op)}

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._held), self._appends, self._entries, self._bytes)


    async def aclose(self) -> None:
        if self._closed:
            return
        pending = [t for t in self._tails.values() if not t.done()]
        if self._purging is not None:
            pending.append(self._purging)
        if pending:
            await asyncio.wait(pending, timeout=self.unavailable_s)
        self._closed = True
        await self._listener.aclose()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=5)
            except TimeoutError:
                pool.terminate()
