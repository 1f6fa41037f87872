"""Tiered history: Redis holds the hot runs, PostgreSQL keeps them after Redis's TTL.

A finished run, archived, then expired from Redis, is still found by id, its events and
listings; an archiver SIGKILLed mid-batch and started again archives every run exactly
once."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from asyncio.subprocess import DEVNULL, PIPE
from pathlib import Path

import httpx
import pytest
import redis

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.store.postgres import PostgresRunStore
from podium.store.redis import RedisRunStore
from podium.store.tiered import TieredRunStore, pending_key
from postgres_fixtures import count_sql, postgres_skip_reason

from .app import effects
from .harness import wait_until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def schema() -> str:
    return f"arch_{uuid.uuid4().hex[:10]}"


def tiered(
    redis_url: str, prefix: str, pg_url: str, schema: str, *, ttl: float = 3600,
    archiver: bool = True,
) -> TieredRunStore:
    return TieredRunStore(
        RedisRunStore(redis_url, prefix=prefix, finished_ttl_s=ttl, reap_every_s=0,
                      unavailable_s=10.0),  # (bulk setup on a busy shared Redis)
        PostgresRunStore(pg_url, schema=schema), archiver=archiver,
    )


async def test_a_run_gone_from_redis_is_read_from_the_archive(
    shared_redis_url: str, prefix: str, postgres_url: str, schema: str, effects_log: Path
) -> None:
    async with tiered(shared_redis_url, prefix, postgres_url, schema, ttl=3.0) as store:
        async with Engine(store) as engine:
            record = await engine.run(effects, "go", tenant="acme")
            hot_run = await engine.create(effects, "later", tenant="acme")  # stays queued
        journal = await store.journal(record.run_id)
        stored = await store.hot.get(record.run_id)  # (its last checkpoint's own time aside,
        assert stored is not None and stored.output == record.output  # the run's record)
        assert len(journal) > 4  # its steps, their profiles, its end
        assert store.archiver is not None
        assert await store.archiver.drain() == 1
        assert await store.archiver.drain() == 0  # nothing twice
        client = redis.Redis.from_url(shared_redis_url)
        try:
            await wait_until(lambda: not client.exists(store.hot._run_key(record.run_id)),
                             30, "the run's Redis TTL")
            assert client.zcard(pending_key(prefix)) == 0
        finally:
            client.close()

    async with tiered(shared_redis_url, prefix, postgres_url, schema, archiver=False) as reader:
        assert await reader.hot.get(record.run_id) is None  # not in Redis any more
        assert await reader.get(record.run_id) == stored  # its profile too
        assert await reader.journal(record.run_id) == journal
        assert await reader.journal(record.run_id, after=2) == journal[3:]
        assert await reader.wait_journal(record.run_id, len(journal) - 1, 0.1) == []
        listed = await reader.list(tenant="acme")
        assert [r.run_id for r in listed] == [hot_run.run_id, record.run_id]
        assert [r.run_id for r in await reader.list(status="completed")] == [record.run_id]
        assert [r.run_id for r in await reader.list(status="queued")] == [hot_run.run_id]
        assert await reader.list(tenant="acme", limit=1) == [await reader.get(hot_run.run_id)]


async def test_a_run_in_both_tiers_is_listed_once(
    shared_redis_url: str, prefix: str, postgres_url: str, schema: str
) -> None:
    async with tiered(shared_redis_url, prefix, postgres_url, schema) as store:
        record = RunRecord("r1", "agent", "x", tenant="t")
        await store.create(record)
        record.status = "failed"
        await store.update(record)
        assert store.archiver is not None
        assert await store.archiver.drain() == 1
        assert await store.archive.get("r1") == await store.hot.get("r1")
        assert [r.run_id for r in await store.list()] == ["r1"]


async def _finish_runs(store: TieredRunStore, n: int) -> dict[str, int]:
    """``n`` finished runs with a few journal entries each; their journal lengths."""
    from podium.engine.records import RunFinished

    async def one(i: int) -> tuple[str, int]:
        record = RunRecord(f"run-{i:04d}", "agent", "x", tenant="t")
        await store.create(record)
        record.status = "completed"
        record.output = f"out {i}"
        entries = [RunFinished(ts=float(j), status="completed") for j in range(1 + i % 3)]
        await store.append(record.run_id, entries, record=record)
        return record.run_id, 1 + i % 3

    # Thirty-two at a time: 600 scripts sent at once on a host with both cores busy left
    # the last replies past the store's 1.5 s bound (the setup, not what is tested).
    gate = asyncio.Semaphore(32)

    async def gated(i: int) -> tuple[str, int]:
        async with gate:
            return await one(i)

    return dict(await asyncio.gather(*(gated(i) for i in range(n))))


async def test_an_archiver_killed_mid_batch_loses_and_repeats_nothing(
    shared_redis_url: str, prefix: str, postgres_url: str, schema: str
) -> None:
    n = 600
    async with tiered(shared_redis_url, prefix, postgres_url, schema, archiver=False) as store:
        lengths = await _finish_runs(store, n)
        await store.archive.get("none")  # creates the schema's tables
    cmd = [sys.executable, "-m", "distributed.archive_proc", shared_redis_url, prefix,
           postgres_url, schema, "50"]
    first = await asyncio.create_subprocess_exec(*cmd, cwd=TESTS, stdout=PIPE)
    try:
        assert first.stdout is not None
        line = await asyncio.wait_for(first.stdout.readline(), 120)
        assert line.startswith(b"batch")  # one batch written, the next one under way
        first.send_signal(signal.SIGKILL)
    finally:
        await first.wait()
    table = f"{schema}.podium_runs"
    archived = count_sql(postgres_url, f"SELECT count(*) FROM {table}")
    # (Usually part of the runs: the kill lands within a few batches, in a transaction or
    # between a commit and its ZREM; on a loaded machine the child may have run ahead.)
    assert archived >= 50
    second = await asyncio.create_subprocess_exec(*cmd, cwd=TESTS, stdout=DEVNULL)
    assert await asyncio.wait_for(second.wait(), 120) == 0

    assert count_sql(postgres_url, f"SELECT count(*) FROM {table}") == n
    assert count_sql(postgres_url, f"SELECT count(*) FROM {schema}.podium_journal") == sum(
        lengths.values())
    async with tiered(shared_redis_url, prefix, postgres_url, schema, archiver=False) as reader:
        for run_id, length in list(lengths.items())[::37]:
            assert await reader.archive.journal(run_id) == await reader.hot.journal(run_id)
            assert len(await reader.archive.journal(run_id)) == length
            assert await reader.archive.get(run_id) == await reader.hot.get(run_id)
        assert await reader.hot.client.zcard(pending_key(prefix)) == 0


@pytest.mark.slow
async def test_the_gateway_serves_an_archived_run_as_if_it_were_hot(
    shared_redis_url: str, prefix: str, fresh_postgres: str, tmp_path: Path
) -> None:
    """End to end: `podium serve` and `podium worker` with an archive; the run expires
    from Redis and its record, events and listing still come from the gateway."""
    from .harness import WorkerProcess, redis_config, serving

    config = redis_config(tmp_path, shared_redis_url, ["tests.distributed.app:effects"],
                          {"pk_arch": "t1"})
    config.write_text(config.read_text().replace(
        "[server]\n",
        f'[server]\nprefix = "{prefix}"\nttl_s = 2\narchive = "{fresh_postgres}"\n'))
    worker = WorkerProcess(tmp_path, "worker", shared_redis_url, prefix,
                           "tests.distributed.app:effects", tmp_path / "effects.log",
                           "--config", str(config))
    client_redis = redis.Redis.from_url(shared_redis_url)
    try:
        await worker.wait_ready()
        with serving(config, tmp_path / "serve.log") as url:
            headers = {"Authorization": "Bearer pk_arch"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
                run = (await client.post("/v1/runs",
                                         json={"agent": "effects", "input": "go"})).json()
                run_id = run["id"]

                async def finished() -> bool:
                    got = (await client.get(f"/v1/runs/{run_id}")).json()
                    return bool(got["status"] == "completed")

                await wait_until(finished, 60, "the run to finish")
                hot = (await client.get(f"/v1/runs/{run_id}")).json()
                hot_events = (await client.get(f"/v1/runs/{run_id}/events")).text
                run_key = f"{prefix}:{{{run_id}}}:run"
                await wait_until(lambda: not client_redis.exists(run_key)
                                 and not client_redis.zcard(pending_key(prefix)),
                                 60, "archived, then gone from Redis")
                cold = (await client.get(f"/v1/runs/{run_id}")).json()
                assert cold == hot
                assert (await client.get(f"/v1/runs/{run_id}/events")).text == hot_events
                listed = (await client.get("/v1/runs")).json()["data"]
                assert [r["id"] for r in listed] == [run_id]
                assert (await client.get("/readyz")).status_code == 200
    finally:
        worker.stop()
        client_redis.close()
