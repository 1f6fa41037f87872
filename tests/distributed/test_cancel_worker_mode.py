"""Worker mode on Redis: a cancel at any moment ends the run ``cancelled``.

The gateway (no engine of its own) and a worker (its own engine and store
client, as in a ``podium worker`` process) share a real Redis. The worker's
store, model and tool stop on events the test controls, so the cancel lands
in the chosen phase; the worker sees it through its cancel poll.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from podium.config import load_config
from podium.engine.driver import Engine
from podium.engine.records import RunFinished
from podium.gateway.auth import KeyRing, Tenant
from podium.gateway.service import Gateway, ServedAgent
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from _held import HeldStore, Hold
from test_cancel_anytime import held_agent

pytestmark = pytest.mark.anyio

TENANT = Tenant("tenant-a")


@pytest.mark.parametrize(
    ("phase", "nth", "after"),
    [
        ("queued", 0, False),
        ("claimed", 0, True),
        ("loading", 0, False),
        ("loading", 0, True),
        ("model", 0, False),
        ("model", 1, False),
        ("tool", 0, False),
        ("checkpoint", 0, False),
        ("checkpoint", 0, True),
    ],
)
async def test_cancel_in_worker_mode(
    shared_redis_url: str, prefix: str, phase: str, nth: int, after: bool
) -> None:
    hold = Hold()
    agent = held_agent(hold, 1)
    config = load_config(None, {"PODIUM_KEYS": "pk_test_a=tenant-a"})
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as gateway_store,
        RedisRunStore(shared_redis_url, prefix=prefix) as worker_store,
        RedisQueue(shared_redis_url, prefix=prefix) as gateway_queue,
        RedisQueue(shared_redis_url, prefix=prefix) as worker_queue,
    ):
        held = HeldStore(worker_store)
        held.hold = hold
        gw = Gateway(
            config, [ServedAgent(agent)], gateway_store, gateway_queue, KeyRing(config.keys)
        )
        worker = Worker(
            worker_queue,
            Engine(held),
            {"held": agent},
            claim_block_s=0.05,
            cancel_poll_s=0.05,
        )
        where = {"claimed": "get", "loading": "update", "checkpoint": "append"}
        hold.where, hold.nth, hold.after = where.get(phase, phase), nth, after
        record, _ = await gw.submit(TENANT, "held", "go", {})
        if phase == "queued":
            cancelled = await gw.cancel(TENANT, record.run_id)
        working = asyncio.create_task(worker.run())
        try:
            if phase != "queued":
                await hold.entered.wait()
                # Held, the run can only end through the cancel: the worker's poll finds
                # the request and cancels its driver, or the gateway ends it in the store.
                cancelled = await gw.cancel(TENANT, record.run_id)
                hold.released.set()
            assert cancelled.status == "cancelled"
        finally:
            hold.released.set()
            await worker.drain(1.0)
            working.cancel()
            await asyncio.gather(working, return_exceptions=True)
        stored = await gateway_store.get(record.run_id)
        assert stored is not None and stored.status == "cancelled"
        journal = await gateway_store.journal(record.run_id)
        ends = [e for _, e in journal if isinstance(e, RunFinished)]
        assert [e.status for e in ends] == ["cancelled"]
        assert isinstance(journal[-1][1], RunFinished)
        assert worker.statistics().dead_lettered == 0
