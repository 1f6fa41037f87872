"""A Worker on RedisQueue + RedisRunStore in this process: completion, fencing, outages."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from podium.engine.driver import Engine
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .app import TOOL_STEPS, effects
from .harness import check_completed_once, effect_lines, submit_runs, wait_until
from .redis_server import RedisServer

pytestmark = pytest.mark.anyio


async def test_worker_completes_runs(shared_redis_url: str, prefix: str, effects_log: Path) -> None:
    ids = [f"r{i}" for i in range(20)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, "effects", ids)
        worker = Worker(queue, Engine(store), {"effects": effects}, concurrency=8,
                        claim_block_s=0.05)
        await worker.run(burst=True)
        assert worker.statistics().completed == 20
        await check_completed_once(store, ids)
        assert len(effect_lines(effects_log)) == 20 * TOOL_STEPS
        assert [r.run_id for r in await store.list(status="completed", limit=5)] != []


async def test_stalled_worker_is_fenced_off(
    shared_redis_url: str, prefix: str, effects_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that stops heartbeating loses its run to another; its late checkpoint is refused."""
    # The stalled worker's call must still be in flight when the taker claims (0.3 s after
    # the claim and more on a loaded machine): 2 s leaves a wide margin, where 0.4 s left 0.1.
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "2.0")
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store_a,
        RedisRunStore(shared_redis_url, prefix=prefix) as store_b,
        RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.2, reclaim_every_s=0) as queue,
        RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.2, reclaim_every_s=3600) as idle,
    ):
        await submit_runs(store_a, queue, "effects", ["contested"])
        # "stalled": it neither heartbeats nor reclaims (as if paused or cut off)
        stalled = Worker(idle, Engine(store_a), {"effects": effects}, consumer="stalled",
                         heartbeat_s=60, claim_block_s=0.05)
        a = asyncio.create_task(stalled.run(burst=True))
        await wait_until(lambda: stalled.statistics().active == 1, 10, "the stalled worker's claim")
        await asyncio.sleep(0.3)  # its lease runs out while its tool call is in flight
        taker = Worker(queue, Engine(store_b), {"effects": effects}, consumer="taker",
                       heartbeat_s=0.05, claim_block_s=0.05)
        monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.01")
        await taker.run(burst=True)
        await asyncio.wait_for(a, 10)
        assert taker.statistics().completed == 1
        assert stalled.statistics().lost == 1 and stalled.statistics().completed == 0
        await check_completed_once(store_b, ["contested"])
        keys = Counter(k for k, _ in effect_lines(effects_log))
        # step 0 was in flight on the stalled worker when it was overtaken: the only repeat
        assert keys["contested:0:0"] == 2
        assert all(n == 1 for k, n in keys.items() if k != "contested:0:0")


async def test_worker_rides_out_a_store_outage(
    private_redis: RedisServer, effects_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis gone for longer than the client retries: the worker backs off and resumes runs."""
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.05")
    ids = [f"r{i}" for i in range(10)]
    url = private_redis.url
    async with (
        RedisRunStore(url, reconnect_retries=1) as store,
        RedisQueue(url, reconnect_retries=1, lease_s=30) as queue,
    ):
        await submit_runs(store, queue, "effects", ids)
        worker = Worker(queue, Engine(store), {"effects": effects}, concurrency=10,
                        claim_block_s=0.05)
        task = asyncio.create_task(worker.run(burst=True))
        await wait_until(lambda: len(effect_lines(effects_log)) >= 10, 10, "runs under way")
        private_redis.kill()
        await asyncio.sleep(1.0)  # longer than one reconnect attempt: errors reach the worker
        private_redis.start()
        await asyncio.wait_for(task, 30)
        assert worker.statistics().completed == 10
        await check_completed_once(store, ids)


async def test_own_expired_lease_is_not_driven_twice(
    shared_redis_url: str, prefix: str, effects_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that reclaims its own overdue run keeps one driver for it, not two."""
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.15")
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.05, reclaim_every_s=0) as queue,
    ):
        await submit_runs(store, queue, "effects", ["mine"])
        worker = Worker(queue, Engine(store), {"effects": effects}, heartbeat_s=60,
                        claim_block_s=0.02, max_deliveries=1000)
        await worker.run(burst=True)
        assert worker.statistics().completed == 1 and worker.statistics().lost == 0
        await check_completed_once(store, ["mine"])
        assert Counter(k for k, _ in effect_lines(effects_log)) == {
            f"mine:{s}:0": 1 for s in range(TOOL_STEPS)
        }


@pytest.mark.parametrize("other_write", ["touch", "end"])
async def test_stale_write_on_a_held_run_is_resumed_or_acked(
    shared_redis_url: str, prefix: str, effects_log: Path, monkeypatch: pytest.MonkeyPatch,
    other_write: str,
) -> None:
    """Another process writes the run while this worker holds its lease: the worker's next
    checkpoint is refused as stale, yet the run is neither lost nor left un-acked."""
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.3")
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisRunStore(shared_redis_url, prefix=prefix) as other,
        RedisQueue(shared_redis_url, prefix=prefix, lease_s=30) as queue,
    ):
        await submit_runs(store, queue, "effects", ["written"])
        worker = Worker(queue, Engine(store), {"effects": effects}, claim_block_s=0.05)
        task = asyncio.create_task(worker.run(burst=True))
        await wait_until(lambda: worker.statistics().active == 1, 10, "the claim")
        record = await other.get("written")
        while record is None or record.status != "running":
            await asyncio.sleep(0.01)
            record = await other.get("written")
        if other_write == "end":
            record.status, record.reason = "failed", "stopped by an operator"
        record.metadata = {"touched": "yes"}
        await other.update(record)  # the worker's tool call is in flight (0.3 s)
        monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.01")
        await asyncio.wait_for(task, 20)  # before the fix: stuck until the 30 s lease ran out
        stats = worker.statistics()
        assert stats.lost == 0 and stats.dead_lettered == 0
        assert await queue.outstanding() == 0
        final = await store.get("written")
        assert final is not None
        if other_write == "end":
            assert final.status == "failed"
        else:
            assert final.status == "completed" and stats.completed == 1
            await check_completed_once(store, ["written"])
