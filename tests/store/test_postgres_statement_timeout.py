"""A statement that hangs (here: behind a lock a second connection holds on the runs'
table) is bounded by the store's ``statement_timeout``, set from the URL
(``?statement_timeout=…``): the server cancels it, the store retries it as an outage, and
a call that cannot get through within ``unavailable_s`` is refused as unavailable (a
gateway's 503 + Retry-After) saying why. Without the setting applied the statement would
wait for the lock for as long as it is held, and these tests fail on their bounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from distributed.harness import wait_until
from podium.engine.records import RunRecord
from podium.errors import ConfigError, StoreUnavailableError
from podium.queue.postgres import PostgresQueue
from podium.store.postgres import PostgresRunStore
from podium.store.postgres_errors import statement_timeout_s
from postgres_fixtures import postgres_skip_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def _locked(url: str) -> AsyncIterator[None]:
    """The runs' table locked by another connection until the block ends."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("LOCK TABLE podium_runs IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            await tx.rollback()
    finally:
        await conn.close()


async def _waiting(url: str) -> set[tuple[int, object]]:
    """The store's statements waiting for a lock: (backend, when each started)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND application_name LIKE 'podium:%' AND datname = current_database()")
    finally:
        await conn.close()
    return {(r["pid"], r["query_start"]) for r in rows}


async def test_a_hung_statement_is_cancelled_by_the_server(fresh_postgres: str) -> None:
    """Locked for longer than the call may wait: refused as unavailable, by the server's
    cancel (not the client's own bound, 5 s past the server's)."""
    async with PostgresRunStore(f"{fresh_postgres}?statement_timeout=300ms",
                                unavailable_s=1.0) as store:
        await store.create(RunRecord("r1", "agent", "hi"))
        async with _locked(fresh_postgres):
            with pytest.raises(StoreUnavailableError) as refused:
                await asyncio.wait_for(store.get("r1"), 20)
    message = str(refused.value)
    assert "statement timeout" in message and "\n" not in message, message


async def test_a_hung_statement_is_retried_until_the_lock_goes(fresh_postgres: str) -> None:
    async with PostgresRunStore(f"{fresh_postgres}?statement_timeout=200",
                                unavailable_s=60.0) as store:
        await store.create(RunRecord("r1", "agent", "hi"))
        async with _locked(fresh_postgres):
            reading = asyncio.ensure_future(store.get("r1"))
            seen: set[tuple[int, object]] = set()

            async def cancelled_and_sent_again() -> bool:
                seen.update(await _waiting(fresh_postgres))
                return len(seen) >= 2  # a second statement: the first was cancelled

            await wait_until(cancelled_and_sent_again, 20, "the statement sent again")
            assert not reading.done()
        record = await asyncio.wait_for(reading, 20)
    assert record is not None and record.run_id == "r1"
    assert store.outages_survived >= 1


def test_the_url_sets_it_in_postgresql_s_spelling() -> None:
    base = "postgresql://podium@db/podium"
    assert statement_timeout_s(base) == 30.0
    assert statement_timeout_s(f"{base}?statement_timeout=1500") == 1.5
    assert statement_timeout_s(f"{base}?sslmode=disable&statement_timeout=2s") == 2.0
    assert statement_timeout_s(f"{base}?statement_timeout=2min") == 120.0
    assert statement_timeout_s(f"{base}?statement_timeout=2s", 7.0) == 7.0  # the caller's
    for bad in ("0", "soon", "-1s", "5 weeks"):
        with pytest.raises(ConfigError, match="statement_timeout"):
            PostgresRunStore(f"{base}?statement_timeout={bad}")
        with pytest.raises(ConfigError, match="statement_timeout"):  # the queue reads it too
            PostgresQueue(f"{base}?statement_timeout={bad}")
