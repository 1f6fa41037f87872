"""The PostgreSQL store's connection pool: opening it (and checking the schema), calls
that wait out an outage (a write asks whether it landed before it is sent again), and
what the store knows of the server's health and of the other processes using it.

:class:`PostgresPool` is the base of :class:`~podium.store.postgres.PostgresRunStore`;
the tables' own reads and writes live beside it (``postgres.py``: runs and journals,
``postgres_threads.py``, ``postgres_memories.py``).
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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from podium.engine.records import JournalEntry, RunRecord
from podium.errors import ConfigError, PodiumError, StoreError, StoreUnavailableError
from podium.memory.item import MemoryItem
from podium.store.base import RunStore
from podium.store.notify import JournalNotifier
from podium.store.postgres_errors import check_postgres_url, is_outage, redact, translate
from podium.store.postgres_errors import statement_timeout_s as statement_timeout_s_of
from podium.store.postgres_listen import JournalListener
from podium.store.postgres_schema import LOCK_KEY as _LOCK_KEY
from podium.store.postgres_schema import check_schema
from podium.threads.record import ThreadRecord

if TYPE_CHECKING:
    import asyncpg

__all__ = ("LIVE", "NOT_LANDED", "PostgresPool")

T = TypeVar("T")
log = logging.getLogger("podium.store")

#: The clause that leaves out expired rows (``%d``: the parameter holding now).
LIVE = "(expires_at IS NULL OR expires_at > $%d)"
#: What a write's ``landed`` check answers when the write did not land.
NOT_LANDED: Any = object()
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection needs on its way back to the pool: nothing, unless a cancelled call
    left a transaction open. (asyncpg's default resets the session, one more round trip
    per call for state this store never sets.)"""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")



class PostgresPool(RunStore):
    """The pool and its calls, shared by the store's parts (see the module's doc)."""

    def __init__(
        self,
        dsn: str,
        *,
        finished_ttl_s: float | None = None,
        max_connections: int = 10,
        unavailable_s: float = 10.0,
        statement_timeout_s: float | None = None,
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
        self._statement_timeout_s = statement_timeout_s_of(dsn, statement_timeout_s)
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
        :data:`NOT_LANDED`) is the write's result."""
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
                        if outcome is not NOT_LANDED:
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

