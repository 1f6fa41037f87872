"""A worker's drain on a real Redis queue gives each run back once: N runs paused by a
drain are N releases, and the stream holds one entry per run afterwards."""

from __future__ import annotations

import asyncio
from collections import Counter

import msgspec
import pytest

from podium import Agent, FunctionModel, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .harness import submit_runs, wait_until

pytestmark = pytest.mark.anyio

RUNS = 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def held_agent(entered: Counter[str], go_on: asyncio.Event) -> Agent:
    @tool
    async def work(query: str) -> str:
        """Work until told to go on.

        Args:
            query: Ignored.
        """
        entered[query] += 1
        await go_on.wait()
        return "done"

    def reply(messages: object, request: object) -> object:
        step = getattr(request, "step", 0)
        run_id = getattr(request, "run_id", "")
        return tool_call_reply(("work", {"query": run_id})) if step < 3 else "finished"

    return Agent("held", FunctionModel(reply), tools=[work])  # type: ignore[arg-type]


@pytest.mark.parametrize("claim_block_s", [1.0, 0.05], ids=["claim-waiting", "claim-polling"])
async def test_a_drain_releases_each_run_once(
    shared_redis_url: str, prefix: str, claim_block_s: float
) -> None:
    entered: Counter[str] = Counter()
    go_on = asyncio.Event()
    agent = held_agent(entered, go_on)
    ids = [f"drain-{i}" for i in range(RUNS)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, agent.name, ids)
        # More slots than runs: the claim loop is waiting on the stream when the drain
        # gives the runs back, and sees their fresh entries.
        worker = Worker(queue, Engine(store), {agent.name: agent}, concurrency=16,
                        claim_block_s=claim_block_s)
        running = asyncio.create_task(worker.run())
        await wait_until(lambda: len(entered) == RUNS, 20, "every run in its first call")
        draining = asyncio.create_task(worker.drain(30.0))
        await asyncio.sleep(0)  # the drain has begun: each run pauses after this step
        go_on.set()
        await asyncio.wait_for(draining, 30)
        await asyncio.wait_for(running, 30)

        stats = worker.statistics()
        assert (stats.released, stats.completed, stats.active) == (RUNS, 0, 0), stats
        key = queue.stream_key("default")
        entries = await queue.client.xrange(key)
        items = [msgspec.msgpack.decode(f[b"d"], type=QueueItem) for _, f in entries]
        assert sorted(i.run_id for i in items) == ids, items  # each run once, none twice
        assert await queue.depth() == RUNS  # waiting for the next worker, held by nobody
        for run_id in ids:
            record = await store.get(run_id)
            assert record is not None and record.status == "running", record


async def test_runs_cut_off_by_the_grace_are_released_once(
    shared_redis_url: str, prefix: str
) -> None:
    """Steps still going when the grace ends are cancelled mid-step: each run once."""
    entered: Counter[str] = Counter()
    agent = held_agent(entered, asyncio.Event())  # never told to go on
    ids = [f"cut-{i}" for i in range(RUNS)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, agent.name, ids)
        worker = Worker(queue, Engine(store), {agent.name: agent}, concurrency=16,
                        claim_block_s=1.0)
        running = asyncio.create_task(worker.run())
        await wait_until(lambda: len(entered) == RUNS, 20, "every run in its first call")
        await asyncio.wait_for(worker.drain(0.05), 30)
        await asyncio.wait_for(running, 30)
        stats = worker.statistics()
        assert (stats.released, stats.completed, stats.active) == (RUNS, 0, 0), stats
        entries = await queue.client.xrange(queue.stream_key("default"))
        items = [msgspec.msgpack.decode(f[b"d"], type=QueueItem) for _, f in entries]
        assert sorted(i.run_id for i in items) == ids, items
