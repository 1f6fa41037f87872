"""The run queue on PostgreSQL: many workers, many machines, no Redis.

For teams that run only PostgreSQL (``--queue postgresql://…``, or ``server.queue``).
Tables (see :mod:`podium.queue.postgres_schema`)::

    podium_queue           one row per queued or in-flight run: consumer NULL while it
                           waits; a claim sets consumer, lease_until and a new claim_no
    podium_queue_versions  the last version submitted per run (see QueueItem.version)
    podium_queue_dead      dead letters (the latest ``dead_letters_kept`` per pool)

A claim is one statement: the oldest waiting rows of the pool, ``FOR UPDATE SKIP
LOCKED`` so that workers claiming at once never wait for, nor take, each other's rows.
The receipt is ``id:claim_no``: a heartbeat, release or the next claim checks it, so a
worker whose lease was taken over can neither extend it nor give the run back. Leases
run on the server's clock (``lease_until``); a row whose lease ran out is taken by the
next claim that scans for them (every ``reclaim_every_s``), which counts the delivery —
but not within one lease of the server starting: its downtime counts in every lease, and
the holders, alive, get a lease to heartbeat first (as the Redis queue's clock does).

A submit or a release notifies ``podium_queue`` (the pool as payload) in the same
statement, delivered on commit; a worker blocked in :meth:`claim` listens on one
connection and looks again when told, and every ``poll_s`` anyway (a listener that is
down, a notification lost with a connection). Outages are waited out up to
``unavailable_s`` (every statement here may be sent again: a versioned submit adds
nothing the second time, an ack or release matches its receipt), then
:class:`~podium.errors.QueueUnavailableError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from podium.errors import ConfigError, PodiumError, QueueUnavailableError
from podium.queue.base import (
    VERSION_TTL_S,
    Claim,
    DeadLetter,
    QueueItem,
    QueueStatistics,
    RunQueue,
)
from podium.queue.postgres_schema import LOCK_KEY, check_queue_schema
from podium.store.postgres_errors import check_postgres_url, is_outage, redact, translate
from podium.store.postgres_errors import statement_timeout_s as statement_timeout_s_of

if TYPE_CHECKING:
    import asyncpg

__all__ = ("CHANNEL", "PostgresQueue")

T = TypeVar("T")
log = logging.getLogger("podium.queue")

CHANNEL = "podium_queue"
DEAD_LETTERS_KEPT = 10_000
_LISTEN_RETRY_S = 1.0

_NOW = "extract(epoch from clock_timestamp())"
_SUBMIT = f"""
WITH q AS (
    INSERT INTO podium_queue (pool, run_id, item) VALUES ($1, $2, $3) RETURNING id
)
SELECT pg_notify('{CHANNEL}', $1) FROM q
"""
# Added only if the version is above the run's last submitted one (or that one expired):
# the upsert's WHERE is evaluated on the row as the last concurrent submit committed it.
_SUBMIT_VERSION = f"""
WITH v AS (
    INSERT INTO podium_queue_versions AS v (run_id, version, expires_at)
    VALUES ($2, $4, {_NOW} + $5)
    ON CONFLICT (run_id) DO UPDATE SET version = excluded.version,
        expires_at = excluded.expires_at
    WHERE v.version < excluded.version OR v.expires_at < {_NOW}
    RETURNING 1
), q AS (
    INSERT INTO podium_queue (pool, run_id, item) SELECT $1, $2, $3 FROM v RETURNING id
)
SELECT pg_notify('{CHANNEL}', $1) FROM q
"""
_CLAIM = """
WITH c AS (
    SELECT id FROM podium_queue WHERE pool = $1 AND consumer IS NULL
    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE podium_queue q SET consumer = $3, deliveries = q.deliveries + 1,
    claim_no = q.claim_no + 1, lease_until = clock_timestamp() + make_interval(secs => $4)
FROM c WHERE q.id = c.id
RETURNING q.id, q.item, q.deliveries, q.claim_no
"""
# Leases that ran out, not within a lease of the server's start (see the module's doc).
_RECLAIM = """
WITH c AS (
    SELECT id FROM podium_queue
    WHERE pool = $1 AND consumer IS NOT NULL AND lease_until < clock_timestamp()
      AND pg_postmaster_start_time() < clock_timestamp() - make_interval(secs => $4)
    ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE podium_queue q SET consumer = $3, deliveries = q.deliveries + 1,
    claim_no = q.claim_no + 1, lease_until = clock_timestamp() + make_interval(secs => $4)
FROM c WHERE q.id = c.id
RETURNING q.id, q.item, q.deliveries, q.claim_no
"""
_HEARTBEAT = """
UPDATE podium_queue q SET lease_until = clock_timestamp() + make_interval(secs => $3)
FROM unnest($1::bigint[], $2::bigint[]) AS h(id, claim_no)
WHERE q.id = h.id AND q.claim_no = h.claim_no AND q.consumer = $4
RETURNING q.id
"""
_ACK = """
WITH gone AS (DELETE FROM podium_queue WHERE id = $1)
DELETE FROM podium_queue_versions WHERE run_id = $2 AND $3
"""
# Given back only by its holder; one delivery given back too (a release is not counted).
_RELEASE = f"""
UPDATE podium_queue SET consumer = NULL, lease_until = NULL,
    deliveries = greatest(deliveries - 1, 0)
WHERE id = $1 AND claim_no = $2 AND consumer = $3
RETURNING pg_notify('{CHANNEL}', pool)
"""
# The dead letter is written from the row it deletes: sent again, it adds nothing.
_DEAD = f"""
WITH gone AS (
    DELETE FROM podium_queue WHERE id = $1 RETURNING pool, run_id, item
), v AS (
    DELETE FROM podium_queue_versions WHERE run_id = $2
)
INSERT INTO podium_queue_dead (pool, run_id, reason, deliveries, ts, item)
SELECT pool, run_id, $3, $4, {_NOW}, item FROM gone
"""
_TRIM_DEAD = """
DELETE FROM podium_queue_dead WHERE pool = $1 AND id <= (
    SELECT id FROM podium_queue_dead WHERE pool = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)
"""
_SIZES = """
SELECT count(*) FILTER (WHERE consumer IS NULL), count(*) FROM podium_queue WHERE pool = $1
"""
_FORGET_EXPIRED = f"""
DELETE FROM podium_queue_versions WHERE run_id IN (
    SELECT run_id FROM podium_queue_versions WHERE expires_at < {_NOW} LIMIT 1000)
"""


class _Counters:
    __slots__ = ("acked", "dead", "in_flight", "redelivered", "submitted", "waiting")

    def __init__(self) -> None:
        self.waiting = self.in_flight = self.submitted = self.acked = 0
        self.redelivered = self.dead = 0


async def _reset(conn: asyncpg.Connection) -> None:
    if conn.is_in_transaction():  # a cancelled call's: nothing else to reset
        await conn.execute("ROLLBACK")


class PostgresQueue(RunQueue):
    """Runs waiting for workers, in PostgreSQL tables (``podium_queue*``).

    ``dsn``: a ``postgresql://`` URL (the store's database, or another). ``schema``: the
    PostgreSQL schema its tables live in (None: the search path's, ``public``).
    ``lease_s``: a worker heartbeats more often (every ``lease_s / 3``); a run whose lease
    ran out goes to the next worker that claims. ``poll_s``: how long a blocked claim
    trusts LISTEN before it looks anyway. ``synchronous_commit=False``: a submit, claim or
    ack is acknowledged before the server flushed it to its WAL (no fsync wait per
    operation; a crash of the server may lose its last fraction of a second: a lost
    submit is found by the workers' stranded sweep, a lost ack or claim delivers the run
    again, which resumes it from its checkpoint).
    """

    shared = True  # outlives its processes: a worker's sweep submits stranded runs

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        lease_s: float = 30.0,
        reclaim_every_s: float | None = None,
        poll_s: float = 1.0,
        unavailable_s: float = 10.0,
        statement_timeout_s: float | None = None,
        connect_timeout_s: float = 5.0,
        max_connections: int = 4,
        create_schema: bool = True,
        dead_letters_kept: int = DEAD_LETTERS_KEPT,
        synchronous_commit: bool = True,
    ) -> None:
        check_postgres_url(dsn)
        if schema is not None and not (schema.replace("_", "a").isalnum()
                                       and not schema[0].isdigit()):
            raise ConfigError(f"schema {schema!r}: letters, digits and _ only, not first a digit")
        self.dsn = dsn
        self.where = redact(dsn)
        self.schema = schema
        self.lease_s = lease_s
        self.reclaim_every_s = lease_s / 4 if reclaim_every_s is None else reclaim_every_s
        self.poll_s = poll_s
        self.unavailable_s = unavailable_s
        self.dead_letters_kept = dead_letters_kept
        self._statement_timeout_s = statement_timeout_s_of(dsn, statement_timeout_s)
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self._create_schema = create_schema
        self._synchronous_commit = synchronous_commit
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._listener: asyncpg.Connection | None = None
        self._next_listen = 0.0
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._next_reclaim: dict[str, float] = {}
        self._counters: dict[str, _Counters] = {}
        self._enc = msgspec.msgpack.Encoder()
        self._item_dec = msgspec.msgpack.Decoder(QueueItem)
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------

    def _settings(self) -> dict[str, str]:
        settings = {"application_name": "podium-queue",
                    "statement_timeout": str(int(self._statement_timeout_s * 1000))}
        if self.schema is not None:
            settings["search_path"] = self.schema
        if not self._synchronous_commit:
            settings["synchronous_commit"] = "off"
        return settings

    async def _ready(self) -> asyncpg.Pool:
        if self._closed:
            raise QueueUnavailableError(f"{self.where}: queue is closed")
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await self._open()
        return self._pool

    async def _open(self) -> asyncpg.Pool:
        import asyncpg

        pool = await asyncpg.create_pool(
            self.dsn, min_size=1, max_size=self._max_connections,
            timeout=self._connect_timeout_s, server_settings=self._settings(),
            command_timeout=self._statement_timeout_s + 5, reset=_reset,
        )
        try:
            async with pool.acquire() as conn:
                if self.schema is not None and self._create_schema:
                    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
                    try:
                        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
                await check_queue_schema(conn, self.where, create=self._create_schema)
        except BaseException:
            await pool.close()
            raise
        return pool

    async def _call(self, op: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``op`` on a pooled connection, sent again after an outage (every statement here
        may be) until ``unavailable_s`` has passed."""
        import asyncpg

        deadline = time.monotonic() + self.unavailable_s
        delay = 0.05
        while True:
            try:
                pool = await self._ready()
                async with pool.acquire(timeout=self._connect_timeout_s) as conn:
                    return await op(conn)
            except PodiumError:
                raise
            except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                    OSError, TimeoutError) as exc:
                if not is_outage(exc) or time.monotonic() + delay > deadline or self._closed:
                    error = translate(exc, self.dsn)
                    if is_outage(exc):
                        raise QueueUnavailableError(str(error)) from None
                    raise error from None
                log.debug("%s: %s; trying again in %.2fs", self.where, exc, delay)
                if self._pool is not None:  # its other connections died the same way
                    await self._pool.expire_connections()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _stats(self, pool: str) -> _Counters:
        c = self._counters.get(pool)
        if c is None:
            c = self._counters[pool] = _Counters()
        return c

    # -- wake-ups ---------------------------------------------------------------------------

    async def _listen(self) -> bool:
        """Listening now, or not (tried at most once a second): a blocked claim then polls.
        Never raises: a wake-up only saves a poll, the table is the truth."""
        conn = self._listener
        if conn is not None and not conn.is_closed():
            return True
        now = time.monotonic()
        if now < self._next_listen:
            return False
        self._next_listen = now + _LISTEN_RETRY_S
        import asyncpg

        try:
            conn = await asyncpg.connect(self.dsn, timeout=self._connect_timeout_s,
                                         server_settings={"application_name": "podium-queue"})
            await conn.add_listener(CHANNEL, self._on_notify)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.debug("queue listener: cannot listen (%s); claims poll", exc)
            return False
        self._listener = conn
        return True

    def _on_notify(self, conn: Any, pid: int, channel: str, pool: str) -> None:
        for waiter in self._waiters.pop(pool, ()):
            if not waiter.done():
                waiter.set_result(None)

    # -- the queue --------------------------------------------------------------------------

    async def submit(self, item: QueueItem) -> bool:
        if not item.enqueued_at:
            item = msgspec.structs.replace(item, enqueued_at=time.time())
        data = self._enc.encode(item)

        async def op(conn: asyncpg.Connection) -> bool:
            if item.version is None:
                await conn.execute(_SUBMIT, item.pool, item.run_id, data)
                return True
            row = await conn.fetchrow(_SUBMIT_VERSION, item.pool, item.run_id, data,
                                      item.version, float(VERSION_TTL_S))
            return row is not None

        added = await self._call(op)
        if added:
            self._stats(item.pool).submitted += 1
        return added

    async def claim(
        self, consumer: str, *, pool: str = "default", count: int = 1, block_s: float = 1.0
    ) -> list[Claim]:
        """Runs whose lease ran out first (every ``reclaim_every_s``), then waiting ones;
        none waiting, it waits up to ``block_s`` for a submit's notification."""
        deadline = time.monotonic() + block_s
        listening = block_s > 0 and await self._listen()
        while True:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if block_s > 0:  # armed before the look: a submit committed after it wakes us
                self._waiters.setdefault(pool, set()).add(waiter)
            try:
                claims = await self._claim(consumer, pool, count)
                left = deadline - time.monotonic()
                if claims or left <= 0:
                    return claims
                wait = min(left, self.poll_s if listening else min(self.poll_s, 0.25))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, wait)
            finally:
                self._waiters.get(pool, set()).discard(waiter)
            listening = await self._listen()

    async def _claim(self, consumer: str, pool: str, count: int) -> list[Claim]:
        mono = time.monotonic()
        scan = mono >= self._next_reclaim.get(pool, 0.0)

        async def op(conn: asyncpg.Connection) -> tuple[list[Any], list[Any]]:
            taken: list[Any] = []
            if scan:
                taken = await conn.fetch(_RECLAIM, pool, count, consumer, self.lease_s)
            fresh: list[Any] = []
            if len(taken) < count:
                fresh = await conn.fetch(_CLAIM, pool, count - len(taken), consumer,
                                         self.lease_s)
            if scan and not taken:
                await conn.execute(_FORGET_EXPIRED)  # versions whose run's end was never seen
            return taken, fresh

        taken, fresh = await self._call(op)
        if scan:
            self._next_reclaim[pool] = time.monotonic() + self.reclaim_every_s
        now = time.time()  # when the look returned: a run's queue wait is never negative
        claims = [self._claim_of(consumer, row, now) for row in taken]
        claims += [self._claim_of(consumer, row, now) for row in sorted(fresh, key=_by_id)]
        self._stats(pool).redelivered += len(taken)
        return claims

    def _claim_of(self, consumer: str, row: Any, now: float) -> Claim:
        item = self._item_dec.decode(row["item"])
        return Claim(item, f"{row['id']}:{row['claim_no']}", int(row["deliveries"]), now,
                     consumer)

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> list[Claim]:
        """Extend the leases ``consumer`` still holds; returns the claims it has lost."""
        if not claims:
            return []
        ids, numbers = zip(*(_receipt(c) for c in claims), strict=True)

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(_HEARTBEAT, list(ids), list(numbers),
                                               self.lease_s, consumer)
            return rows

        kept = {row["id"] for row in await self._call(op)}
        return [c for c in claims if _receipt(c)[0] not in kept]

    async def ack(self, claim: Claim, *, ended: bool = True) -> None:
        row_id, _ = _receipt(claim)
        await self._call(lambda conn: conn.execute(_ACK, row_id, claim.item.run_id, ended))
        self._stats(claim.item.pool).acked += 1

    async def forget(self, run_id: str) -> None:
        await self._call(lambda conn: conn.execute(
            "DELETE FROM podium_queue_versions WHERE run_id = $1", run_id))

    async def release(self, claim: Claim) -> None:
        """Hand the run to the next worker now (if ``claim`` still holds it); a release is
        not counted as a delivery."""
        row_id, number = _receipt(claim)
        await self._call(lambda conn: conn.execute(_RELEASE, row_id, number, claim.consumer))

    async def dead_letter(self, claim: Claim, reason: str) -> None:
        row_id, _ = _receipt(claim)
        pool = claim.item.pool

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(_DEAD, row_id, claim.item.run_id, reason, claim.deliveries)
            await conn.execute(_TRIM_DEAD, pool, self.dead_letters_kept)

        await self._call(op)
        self._stats(pool).dead += 1

    async def dead_letters(self, pool: str = "default", limit: int = 100) -> list[DeadLetter]:
        """The dead letters of ``pool``, oldest first."""
        rows = await self._call(lambda conn: conn.fetch(
            "SELECT item, reason, deliveries, ts FROM podium_queue_dead WHERE pool = $1 "
            "ORDER BY id LIMIT $2", pool, limit))
        return [DeadLetter(self._item_dec.decode(r["item"]), r["reason"], int(r["deliveries"]),
                           float(r["ts"])) for r in rows]

    async def depth(self, pool: str = "default") -> int:
        """Runs waiting for a worker (not in anyone's lease)."""
        waiting, _ = await self._sizes(pool)
        return waiting

    async def outstanding(self, pool: str = "default") -> int:
        """Runs not yet acked: waiting, or in flight on some worker (alive or not)."""
        _, total = await self._sizes(pool)
        return total

    async def _sizes(self, pool: str) -> tuple[int, int]:
        row = await self._call(lambda conn: conn.fetchrow(_SIZES, pool))
        waiting, total = int(row[0]), int(row[1])
        c = self._stats(pool)
        c.waiting, c.in_flight = waiting, total - waiting
        return waiting, total

    def statistics(self, pool: str = "default") -> QueueStatistics:
        """This process's counters; ``waiting``/``in_flight`` as last seen by ``depth``."""
        c = self._stats(pool)
        return QueueStatistics(
            pool, c.waiting, c.in_flight, c.submitted, c.acked, c.redelivered, c.dead
        )

    async def aclose(self) -> None:
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):  # closing what may be gone already
                await listener.close(timeout=2)
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), 5)


def _by_id(row: Any) -> int:
    return int(row["id"])


def _receipt(claim: Claim) -> tuple[int, int]:
    row_id, _, number = claim.receipt.partition(":")
    return int(row_id), int(number)
