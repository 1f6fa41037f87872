"""PostgreSQL for the tests: a database of this test session's own on the machine's
server (``CREATE DATABASE podium_test_<random>``, dropped at the end), each test in a
schema of its own within it, or a private server a test may kill and restart.
Registered as fixtures by the root ``conftest.py``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from distributed.postgres_server import PostgresServer

__all__ = (
    "POSTGRES_URL",
    "count_sql",
    "fresh_postgres",
    "new_database",
    "postgres_reachable",
    "postgres_url",
    "private_postgres",
    "run_sql",
    "with_database",
)

#: The server the tests use (its ``postgres`` database is only used to create others).
POSTGRES_URL = os.environ.get("PODIUM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


async def _execute(url: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=10)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _run(url: str, *statements: str) -> None:
    """The statements, run on a loop of their own in a thread: callers may be inside a
    running loop (a fixture asked for from an async one)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _execute(url, *statements)).result()


def count_sql(url: str, query: str) -> int:
    """The one number ``query`` answers on ``url``."""
    import asyncpg

    async def ask() -> int:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            return int(await conn.fetchval(query))
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, ask()).result()


def run_sql(url: str, *statements: str) -> None:
    """Run ``statements`` on ``url`` (from a test, inside a running loop or not)."""
    _run(url, *statements)


def postgres_reachable(url: str = POSTGRES_URL) -> str | None:
    """None if asyncpg is installed and the server at ``url`` answers, else why not."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "asyncpg is not installed (pip install 'podium[postgres]')"
    try:
        _run(url, "SELECT 1")
    except Exception as exc:
        return f"no PostgreSQL at {url}: {exc}"
    return None


_reason: list[str | None] = []


def postgres_skip_reason() -> str | None:
    """Asked once per process (a skip mark is built at import)."""
    if not _reason:
        _reason.append(postgres_reachable())
    return _reason[0]


@contextlib.contextmanager
def new_database(prefix: str = "podium_test") -> Iterator[str]:
    """A database of its own on the machine's server (for tests that need an empty one, or
    one whose tables they change), dropped afterwards."""
    why = postgres_skip_reason()
    if why is not None:
        pytest.skip(why)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    _run(POSTGRES_URL, f"CREATE DATABASE {name}")
    try:
        yield with_database(POSTGRES_URL, name)
    finally:
        _run(POSTGRES_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the machine's server for this session (each xdist worker its
    own), dropped at the end."""
    with new_database() as url:
        yield url


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    """An empty database of this test's own."""
    with new_database() as url:
        yield url


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (initdb'd, fsync on), stopped afterwards."""
    from distributed.postgres_server import PostgresServer, postgres_binaries

    if postgres_binaries() is None:
        pytest.skip("no initdb/pg_ctl installed")
    server = PostgresServer()
    server.start()
    yield server
    server.stop()
