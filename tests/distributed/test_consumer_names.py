"""Worker names on the queue: unique per process where hostname and PID collide (two
containers, each its PID 1), and forgotten when their worker stops, so a fleet that
restarts its workers for weeks does not grow its consumer list by a name per start."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest
import redis.asyncio as aioredis

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.memory import MemoryRunStore
from podium.worker.worker import Worker, consumer_name

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _consumers(url: str, queue: RedisQueue, pool: str = "default") -> dict[str, int]:
    """``{name: pending}`` of the pool's group, as Redis lists them."""
    client = aioredis.Redis.from_url(url)
    try:
        rows: list[dict[str, Any]] = await client.xinfo_consumers(queue.stream_key(pool), "workers")
    finally:
        await client.aclose()
    return {row["name"].decode(): int(row["pending"]) for row in rows}


def test_names_differ_where_host_and_pid_do_not() -> None:
    names = {consumer_name() for _ in range(100)}
    assert len(names) == 100
    host_pid = f"{socket.gethostname()}-{os.getpid()}-"
    assert all(n.startswith(host_pid) for n in names), names  # still readable in a log


async def test_same_host_and_pid_cannot_extend_the_others_runs(
    shared_redis_url: str, prefix: str
) -> None:
    """Two workers built in one process (same hostname, same PID) are two consumers: the
    queue's ownership check refuses the one's heartbeat on the other's run."""
    store = MemoryRunStore()
    engine = Engine(store)
    async with RedisQueue(shared_redis_url, prefix=prefix) as queue:
        first = Worker(queue, engine, {})
        second = Worker(queue, engine, {})
        assert first.consumer != second.consumer
        await queue.submit(QueueItem("run-1", "a"))
        [claim] = await queue.claim(first.consumer, block_s=0.1)
        lost = await queue.heartbeat(second.consumer, [claim])
        assert lost == [claim]  # not the second's: it may not extend it
        assert await queue.heartbeat(first.consumer, [claim]) == []
        await queue.ack(claim)


async def _served_one(queue: RedisQueue, name: str) -> None:
    """Make ``name`` a consumer of the group holding nothing (Redis lists a consumer from
    its first delivery): it claims a run and acks it."""
    await queue.submit(QueueItem(f"run-of-{name}", "a"))
    [claim] = await queue.claim(name, block_s=0.1)
    await queue.ack(claim)


async def test_retire_forgets_only_a_consumer_that_holds_nothing(
    shared_redis_url: str, prefix: str
) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix) as queue:
        await _served_one(queue, "idle")
        await queue.submit(QueueItem("run-1", "a"))
        [claim] = await queue.claim("holder", block_s=0.1)
        assert await _consumers(shared_redis_url, queue) == {"holder": 1, "idle": 0}
        assert not await queue.retire("holder")  # its run would never be delivered again
        assert await queue.retire("idle")
        assert await _consumers(shared_redis_url, queue) == {"holder": 1}
        await queue.ack(claim)
        assert await queue.retire("holder")
        assert await _consumers(shared_redis_url, queue) == {}
        assert not await queue.retire("holder", "never-used")  # no stream: nothing to do


async def test_idle_consumers_holding_nothing_are_forgotten(
    shared_redis_url: str, prefix: str
) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix) as queue:
        for name in ("dead-1", "dead-2"):
            await _served_one(queue, name)
        await queue.submit(QueueItem("run-1", "a"))
        await queue.claim("dead-with-a-run", block_s=0.1)
        # Nobody has been idle an hour: nothing goes.
        assert await queue.forget_idle_consumers("default", 3600) == 0
        assert len(await _consumers(shared_redis_url, queue)) == 3
        # Idle for any time at all: the two holding nothing go, the one holding a run stays
        # (its run is taken over by a reclaim, which empties it; the next sweep forgets it).
        assert await queue.forget_idle_consumers("default", 0) == 2
        assert await _consumers(shared_redis_url, queue) == {"dead-with-a-run": 1}
        # A pool never used: nothing to forget, and no error.
        assert await queue.forget_idle_consumers("never-used", 0) == 0


async def test_a_drained_worker_leaves_no_name_behind(
    shared_redis_url: str, prefix: str
) -> None:
    store = MemoryRunStore()
    engine = Engine(store)
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=3) as queue:
        worker = Worker(queue, engine, {}, claim_block_s=0.05)
        running = asyncio.create_task(worker.run())
        # A run for an agent it does not serve: delivered (its name is listed from then
        # on), dead-lettered at once, acked.
        await store.create(RunRecord("run-1", "unknown", "go"))
        await queue.submit(QueueItem("run-1", "unknown"))
        for _ in range(500):
            if worker.statistics().dead_lettered:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the worker never took the run")
        assert await _consumers(shared_redis_url, queue) == {worker.consumer: 0}
        await worker.drain(1.0)
        await asyncio.wait_for(running, 10)
        assert await _consumers(shared_redis_url, queue) == {}
