"""The backends the conformance suites run against: every RunStore and every RunQueue.

A new backend is one more parameter here, not a new set of tests. Each backend
gives handles on one shared set of data (a second handle is a second holder,
like a second worker process, where the backend can have one) and, where it
has a backing service, a way to restart it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from distributed.postgres_server import PostgresServer
from distributed.redis_server import RedisServer
from podium.queue.base import RunQueue
from podium.queue.local import LocalQueue
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore
from postgres_fixtures import postgres_skip_reason
from redis_fixtures import REDIS_URL, delete_prefix, redis_reachable

needs_redis = pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")
needs_postgres = pytest.mark.skipif(
    postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""
)


class StoreBackend:
    """Opens handles on one store's data; ``separate_holders``: whether two handles are two
    holders (two processes) rather than one shared object."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self.tmp = tmp
        self.separate_holders = name != "memory"
        self.restartable = name != "memory"
        self.prefix = f"podium-conf-{uuid.uuid4().hex[:10]}"
        self.redis_url = REDIS_URL
        self.server: RedisServer | None = None
        #: Postgres: the session's database, each backend in a schema of its own.
        self.postgres_url = ""
        self.postgres_server: PostgresServer | None = None
        self._memory: dict[tuple[Any, ...], MemoryRunStore] = {}
        self._open: list[RunStore] = []
        self._closing: list[asyncio.Future[None]] = []

    def store(self, **options: Any) -> RunStore:
        """A handle; ``finished_ttl_s`` is understood by every store."""
        store: RunStore
        if self.name == "memory":
            key = tuple(sorted(options.items()))
            if key not in self._memory:
                self._memory[key] = MemoryRunStore(**options)
            return self._memory[key]
        if self.name == "sqlite":
            store = SQLiteRunStore(self.tmp / f"runs-{len(options)}.sqlite", **options)
        elif self.name == "postgres":
            from podium.store.postgres import PostgresRunStore

            schema = f"{self.prefix.replace('-', '_')}_{len(options)}"
            # Few connections each: a test opens many stores (one per hypothesis example)
            # on a server that other test sessions share.
            store = PostgresRunStore(self.postgres_url, schema=schema, max_connections=3,
                                     **options)
            self._retire_old_handles()
        else:
            from podium.store.redis import RedisRunStore

            store = RedisRunStore(self.redis_url, prefix=self.prefix, **options)
        self._open.append(store)
        return store

    def use_private_redis(self, server: RedisServer) -> None:
        self.server = server
        self.redis_url = server.url

    def _retire_old_handles(self, keep: int = 8) -> None:
        """Close all but the newest ``keep`` PostgreSQL handles: a hypothesis test opens
        new ones for every example, and each holds connections of a server that other test
        sessions share (100 in all): the oldest belong to examples that have ended."""
        from podium.store.postgres import PostgresRunStore

        handles = [s for s in self._open if isinstance(s, PostgresRunStore)]
        for old in handles[:-keep] if len(handles) >= keep else []:
            self._open.remove(old)
            self._closing.append(asyncio.ensure_future(old.aclose()))

    async def prepare(self) -> None:
        """PostgreSQL: the tables made now, in the schemas ``store`` uses, so that the
        test's own first call does not pay for them (tests with short TTLs and timeouts
        count from before it)."""
        if self.name != "postgres":
            return
        from podium.store.postgres import PostgresRunStore

        for variant in range(2):  # the schemas of store() and of store(finished_ttl_s=…)
            schema = f"{self.prefix.replace('-', '_')}_{variant}"
            async with PostgresRunStore(self.postgres_url, schema=schema) as store:
                await store.list(limit=1)

    def use_private_postgres(self, server: PostgresServer) -> None:
        self.postgres_server = server
        self.postgres_url = server.url

    async def restart(self) -> None:
        """Restart the backing service: SQLite's file is closed and opened again by new
        handles; a private redis-server is SIGKILLed and started again on its AOF; a
        private PostgreSQL stopped at once (no checkpoint) and started on its WAL."""
        if self.postgres_server is not None:
            await asyncio.to_thread(self.postgres_server.kill)
            await asyncio.to_thread(self.postgres_server.start)
        elif self.name == "sqlite":
            for store in self._open:
                await store.aclose()
            self._open.clear()
        elif self.server is not None:
            self.server.kill()
            self.server.start()

    async def aclose(self) -> None:
        for store in [*self._open, *self._memory.values()]:
            await store.aclose()
        for closing in self._closing:
            await closing
        if self.name == "redis" and self.server is None:
            delete_prefix(self.redis_url, self.prefix)


STORES = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("redis", marks=needs_redis),
    pytest.param("postgres", marks=needs_postgres),
]
QUEUES = [
    pytest.param("local"),
    pytest.param("redis", marks=needs_redis),
    pytest.param("postgres", marks=needs_postgres),
]


@pytest.fixture(params=STORES)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreBackend]:
    b = StoreBackend(request.param, tmp_path)
    if b.name == "postgres":
        b.postgres_url = request.getfixturevalue("postgres_url")
        await b.prepare()
    try:
        yield b
    finally:
        await b.aclose()


class QueueBackend:
    """Opens queues on one queue's data, with a lease of ``lease_s`` seconds."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix = f"podium-conf-{uuid.uuid4().hex[:10]}"
        self.redis_url = REDIS_URL
        self.server: RedisServer | None = None
        self.restartable = name != "local"
        #: Postgres: the session's database, each backend in a schema of its own.
        self.postgres_url = ""
        self.postgres_server: PostgresServer | None = None
        self._local: LocalQueue | None = None
        self._open: list[RunQueue] = []

    def use_private_redis(self, server: RedisServer) -> None:
        self.server = server
        self.redis_url = server.url

    def use_private_postgres(self, server: PostgresServer) -> None:
        self.postgres_server = server
        self.postgres_url = server.url

    def use_private_server(self, request: pytest.FixtureRequest) -> None:
        """This backend's service, private to the test (one it may restart)."""
        if self.name == "postgres":
            self.use_private_postgres(request.getfixturevalue("private_postgres"))
        else:
            self.use_private_redis(request.getfixturevalue("private_redis"))

    def restart(self) -> None:
        """SIGKILL the private redis-server and start it again on its AOF; stop the
        private PostgreSQL at once (no checkpoint) and start it on its WAL."""
        if self.postgres_server is not None:
            self.postgres_server.kill()
            self.postgres_server.start()
            return
        assert self.server is not None
        self.server.kill()
        self.server.start()

    def queue(self, *, lease_s: float = 30.0) -> RunQueue:
        if self.name == "local":  # one process: every handle is the same queue
            if self._local is None:
                self._local = LocalQueue(lease_s=lease_s)
            return self._local
        if self.name == "postgres":
            from podium.queue.postgres import PostgresQueue

            pg = PostgresQueue(self.postgres_url, schema=self.prefix.replace("-", "_"),
                               lease_s=lease_s, reclaim_every_s=0, max_connections=2)
            self._open.append(pg)
            return pg
        from podium.queue.redis import RedisQueue

        queue = RedisQueue(
            self.redis_url, prefix=self.prefix, lease_s=lease_s, reclaim_every_s=0
        )
        self._open.append(queue)
        return queue

    async def aclose(self) -> None:
        for queue in self._open:
            await queue.aclose()
        if self._local is not None:
            await self._local.aclose()
        if self.name == "redis" and self.server is None:
            delete_prefix(REDIS_URL, self.prefix)


@pytest.fixture(params=QUEUES)
async def queues(request: pytest.FixtureRequest) -> AsyncIterator[QueueBackend]:
    b = QueueBackend(request.param)
    if b.name == "postgres":
        b.postgres_url = request.getfixturevalue("postgres_url")
    try:
        yield b
    finally:
        await b.aclose()
