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
``statement_timeout_s`` bounds every statement on the server. Finished runs expire
after ``finished_ttl_s`` if it is set (None: kept until deleted).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import (
    ConfigError,
    PodiumError,
    RunNotFoundError,
    StaleRunError,
    StoreError,
    StoreUnavailableError,
    ThreadNotFoundError,
)
from podium.memory.item import MemoryItem
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.notify import JournalNotifier
from podium.store.postgres_errors import check_postgres_url, is_outage, redact, translate
from podium.store.postgres_listen import CHANNEL, JournalListener
from podium.store.postgres_schema import LOCK_KEY as _LOCK_KEY
from podium.store.postgres_schema import check_schema
from podium.threads.record import ThreadRecord

if TYPE_CHECKING:
    import asyncpg

__all__ = ("PostgresRunStore",)

T = TypeVar("T")
log = logging.getLogger("podium.store")

_LIVE = "(expires_at IS NULL OR expires_at > $%d)"
_PURGE_EVERY_S = 1.0
_PURGE_BATCH = 1000
_MAX_SEQ = 2**63 - 1
_NOT_LANDED: Any = object()
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

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


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection needs on its way back to the pool: nothing, unless a cancelled call
    left a transaction open. (asyncpg's default resets the session, one more round trip
    per call for state this store never sets.)"""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class PostgresRunStore(RunStore):
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

    def __init__(
        self,
        dsn: str,
        *,
        finished_ttl_s: float | None = None,
        max_connections: int = 10,
        unavailable_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        create_schema: bool = True,
        schema: str | None = None,
        synchronous_commit: bool = True,
    ) -> None:
        check_postgres_url(dsn)
        self.dsn = dsn
        self.where = redact(dsn)
        self.finished_ttl_s = finished_ttl_s
        self.unavailable_s = unavailable_s
        self._max_connections = max_connections
        self._statement_timeout_s = statement_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._create_schema = create_schema
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(f"schema {schema!r}: letters, digits and _ only, not first a digit")
        self.schema = schema
        self._synchronous_commit = synchronous_commit
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._encoder = msgspec.msgpack.Encoder()
        self._record_decoder = msgspec.msgpack.Decoder(RunRecord)
        self._entry_decoder = msgspec.msgpack.Decoder(JournalEntry)
        self._thread_decoder = msgspec.msgpack.Decoder(ThreadRecord)
        self._memory_decoder = msgspec.msgpack.Decoder(MemoryItem)
        self._notifier: JournalNotifier | None = JournalNotifier()
        self._held: dict[str, int] = {}  # run -> the version this store wrote last
        self._tails: dict[str, asyncio.Task[Any]] = {}  # run -> its last write, in order
        self._purging: asyncio.Task[None] | None = None
        self._next_purge = 0.0
        self._problem: str | None = None
        #: Calls that met an outage (a cut connection, a restarting server) and went on
        #: after retrying: what the fault tests and an operator's metrics look at.
        self.outages_survived = 0
        #: How this process's connections name themselves to the server: other processes
        #: driving runs on the database are seen by it (see :meth:`sole_user`). A store
        #: that only looks (``create_schema=False``: ``podium runs``) is not counted.
        role = "podium" if create_schema else "podium-viewer"
        self.application_name = f"{role}:{socket.gethostname()[:32]}:{os.getpid()}"
        self._others: builtins.list[int] | None = None  # read when the pool opened
        self._listener = JournalListener(dsn, self._notifier, connect_timeout_s,
                                         self.application_name)
        self._appends = 0
        self._entries = 0
        self._bytes = 0
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------

    async def _ready(self) -> asyncpg.Pool:
        """The pool, opened on first use (and the schema checked), on the running loop."""
        if self._closed:
            raise StoreError(f"{self.where}: store is closed")
        pool = self._pool
        loop = asyncio.get_running_loop()
        if pool is not None and self._loop is loop:
            return pool
        if self._opening is None or self._loop is not loop:
            if self._loop is not None and self._loop is not loop and not self._loop.is_closed():
                raise StoreError(
                    f"{self.where}: this store serves another event loop, still open; "
                    "open one PostgresRunStore per loop"
                )
            self._loop, self._opening, self._pool = loop, asyncio.Lock(), None
        async with self._opening:
            if self._pool is None:
                self._pool = await self._open()
            return self._pool

    async def _open(self) -> asyncpg.Pool:
        import asyncpg

        settings = {
            "application_name": self.application_name,
            "statement_timeout": str(int(self._statement_timeout_s * 1000)),
        }
        if self.schema is not None:
            settings["search_path"] = self.schema
        if not self._synchronous_commit:
            settings["synchronous_commit"] = "off"
        pool = await asyncpg.create_pool(
            self.dsn, min_size=1, max_size=self._max_connections,
            timeout=self._connect_timeout_s, server_settings=settings,
            # (the client-side bound, a little past the server's own)
            command_timeout=self._statement_timeout_s + 5,
            reset=_reset,
        )
        try:
            async with pool.acquire() as conn:
                if self.schema is not None and self._create_schema:
                    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
                    try:  # two stores opening at once: one creates it, the other sees it
                        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
                await check_schema(conn, self.where, create=self._create_schema)
                self._others = await self._other_drivers(conn)
        except BaseException:
            await pool.close()
            raise
        return pool

    async def _call(
        self,
        op: Callable[[asyncpg.Connection], Awaitable[T]],
        landed: Callable[[asyncpg.Connection], Awaitable[Any]] | None = None,
    ) -> T:
        """Run ``op`` on a pooled connection, waiting out an outage up to ``unavailable_s``.

        A write passes ``landed``: after a failure that may have happened after the
        server committed, it is asked first on the new connection, and its answer (not
        :data:`_NOT_LANDED`) is the write's result."""
        import asyncpg

        deadline = time.monotonic() + self.unavailable_s
        delay = 0.05
        tried = False
        while True:
            try:
                pool = await self._ready()
                async with pool.acquire(timeout=self._connect_timeout_s) as conn:
                    if tried and landed is not None:
                        outcome = await landed(conn)
                        if outcome is not _NOT_LANDED:
                            self.outages_survived += 1
                            return outcome  # type: ignore[no-any-return]
                    result = await op(conn)
            except PodiumError:
                raise
            except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                    OSError, TimeoutError) as exc:
                if not is_outage(exc) or time.monotonic() + delay > deadline or self._closed:
                    error = translate(exc, self.dsn)
                    if isinstance(error, StoreUnavailableError):
                        self._problem = str(error)
                    raise error from None
                log.debug("%s: %s; trying again in %.2fs", self.where, exc, delay)
                if not tried and self._pool is not None:
                    # Its other idle connections most likely died the same way (a restart).
                    await self._pool.expire_connections()
                tried = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            self._problem = None
            if tried:
                self.outages_survived += 1
            return result

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
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("tenant", tenant), ("status", status), ("agent", agent)):
            if value is not None:
                params.append(value)
                clauses.append(f"{column} = ${len(params)}")
        if since is not None:
            params.append(since)
            clauses.append(f"created_at >= ${len(params)}")
        if until is not None:
            params.append(until)
            clauses.append(f"created_at <= ${len(params)}")
        params.append(time.time())
        clauses.append(_LIVE % len(params))
        params.append(max(limit, 0))
        sql = (f"SELECT record FROM podium_runs WHERE {' AND '.join(clauses)}"
               f" ORDER BY created_at DESC LIMIT ${len(params)}")

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

    # -- threads ----------------------------------------------------------------------------

    async def create_thread(self, thread: ThreadRecord) -> None:
        import asyncpg

        thread.updated_at = thread.updated_at or thread.created_at
        blob = self._encoder.encode(thread)
        args = (thread.thread_id, thread.tenant, thread.updated_at, thread.version, blob,
                thread.expires_at)

        async def op(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                # An expired thread's id is free again: it goes first.
                await conn.execute(
                    "DELETE FROM podium_threads WHERE thread_id = $1 AND expires_at <= $2",
                    thread.thread_id, time.time(),
                )
                try:
                    await conn.execute(
                        "INSERT INTO podium_threads VALUES ($1, $2, $3, $4, $5, $6)", *args
                    )
                except asyncpg.UniqueViolationError:
                    raise StoreError(f"thread {thread.thread_id} exists") from None

        await self._call(op)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        async def op(conn: asyncpg.Connection) -> bytes | None:
            blob: bytes | None = await conn.fetchval(
                f"SELECT record FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, time.time(),
            )
            return blob

        blob = await self._call(op)
        return None if blob is None else self._thread_decoder.decode(blob)

    async def update_thread(self, thread: ThreadRecord) -> None:
        expected = thread.version
        thread.version += 1
        blob = self._encoder.encode(thread)
        thread_id, updated, expires = thread.thread_id, thread.updated_at, thread.expires_at

        async def op(conn: asyncpg.Connection) -> None:
            now = time.time()
            done = await conn.execute(
                "UPDATE podium_threads SET updated_at = $1, version = $2 + 1, record = $3,"
                f" expires_at = $4 WHERE thread_id = $5 AND version = $2 AND {_LIVE % 6}",
                updated, expected, blob, expires, thread_id, now,
            )
            if done != "UPDATE 0":
                return
            version = await conn.fetchval(
                f"SELECT version FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, now,
            )
            if version is None:
                raise ThreadNotFoundError(thread_id)
            raise StaleRunError(
                f"thread {thread_id} is at version {version}, this writer holds {expected}"
            )

        async def landed(conn: asyncpg.Connection) -> Any:
            stored = await conn.fetchval(
                "SELECT record FROM podium_threads WHERE thread_id = $1", thread_id)
            return None if stored == blob else _NOT_LANDED

        try:
            await self._call(op, landed)
        except asyncio.CancelledError:
            raise
        except BaseException:
            thread.version = expected
            raise

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        if tenant is None:
            sql = f"SELECT record FROM podium_threads WHERE {_LIVE % 1}"
            params: list[Any] = [time.time()]
        else:
            sql = f"SELECT record FROM podium_threads WHERE tenant = $2 AND {_LIVE % 1}"
            params = [time.time(), tenant]
        sql += f" ORDER BY updated_at DESC LIMIT ${len(params) + 1}"
        params.append(max(limit, 0))

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *params)
            return rows

        decode = self._thread_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def delete_thread(self, thread_id: str) -> bool:
        async def op(conn: asyncpg.Connection) -> bool:
            done = await conn.execute(
                f"DELETE FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, time.time(),
            )
            return bool(done != "DELETE 0")

        return await self._call(op)

    # -- long-term memory -------------------------------------------------------------------

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        # (str.encode refuses a lone surrogate with a ValueError, before anything is sent)
        args = (namespace.encode(), item.key.encode(), item.created_at,
                self._encoder.encode(item), item.text.replace("\x00", " "))

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "INSERT INTO podium_memories (namespace, key, created_at, item, body)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (namespace, key) DO UPDATE SET"
                " created_at = EXCLUDED.created_at, item = EXCLUDED.item, body = EXCLUDED.body",
                *args,
            )

        await self._call(op)

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        space = namespace.encode()

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT item FROM podium_memories WHERE namespace = $1"
                " ORDER BY created_at DESC LIMIT $2",
                space, max(limit, 0),
            )
            return rows

        decode = self._memory_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def search_memories(
        self, namespace: str, query: str, limit: int = 5
    ) -> builtins.list[MemoryItem]:
        """The namespace's items matching ``query`` (PostgreSQL full-text search, any of its
        words), best match first, then newest. Only ``namespace`` is searched: a tenant's
        namespace is the bound of what its agents can find."""

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                # Any of the query's words (each quoted: a word like "a:b" or "x&y" is a
                # word, never tsquery syntax), ranked by how much of the item matches.
                """SELECT item FROM podium_memories,
                       to_tsquery('simple', array_to_string(array(
                           SELECT quote_literal(w)
                           FROM unnest(tsvector_to_array(to_tsvector('simple', $2))) AS w
                       ), ' | ')) AS q
                   WHERE namespace = $1 AND q <> ''::tsquery AND words @@ q
                   ORDER BY ts_rank(words, q) DESC, created_at DESC LIMIT $3""",
                namespace.encode(), query.replace("\x00", " "), max(limit, 0),
            )
            return rows

        decode = self._memory_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def delete_memory(self, namespace: str, key: str) -> bool:
        space, name = namespace.encode(), key.encode()

        async def op(conn: asyncpg.Connection) -> bool:
            done = await conn.execute(
                "DELETE FROM podium_memories WHERE namespace = $1 AND key = $2",
                space, name,
            )
            return bool(done != "DELETE 0")

        return await self._call(op)

    # -- health and lifecycle ----------------------------------------------------------------

    async def _other_drivers(self, conn: asyncpg.Connection) -> builtins.list[int]:
        """The process ids of the other processes driving runs on this database now (by
        their connections' names: ``podium:HOST:PID``)."""
        names = await conn.fetch(
            "SELECT DISTINCT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'podium:%'"
            " AND application_name <> $1",
            self.application_name,
        )
        pids = []
        for (name,) in names:
            with contextlib.suppress(ValueError):
                pids.append(int(name.rpartition(":")[2]))
        return pids

    def sole_user(self) -> bool | None:
        """Whether no other process drove runs on this database when the store opened (its
        connections name themselves ``podium:HOST:PID`` to the server); None before the
        store has opened (its first call), and for a store that only looks. An embedded
        server resumes the runs an earlier one left only when it is alone."""
        if not self._create_schema or self._others is None:
            return None
        return not self._others

    def other_users(self) -> builtins.list[int]:
        """The process ids (on their hosts) of the others, as of the store's opening."""
        return list(self._others or ())

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._held), self._appends, self._entries, self._bytes)

    def problem(self) -> str | None:
        """The outage the last call gave up on, until a call succeeds again."""
        return self._problem

    async def health(self) -> str | None:
        """Why the store cannot take writes now: the server does not answer, or is read-only
        (a standby, or ``default_transaction_read_only``)."""
        async def op(conn: asyncpg.Connection) -> str:
            value: str = await conn.fetchval("SHOW transaction_read_only")
            return value

        try:
            read_only = await self._call(op)
        except StoreError as exc:
            return str(exc)
        if read_only == "on":
            return f"{self.where}: the server is read-only (a standby?)"
        return None

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
