"""Redis away: store and queue calls fail fast with the typed errors, work again when it is
back (same objects, no restart), and followers ride the outage out."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from podium.engine.records import ModelTurn, RunRecord
from podium.errors import QueueUnavailableError, StoreUnavailableError
from podium.messages import Message
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .redis_server import RedisServer

pytestmark = pytest.mark.anyio

#: What the gateway promises: a failed store/queue call is known within its unavailable
#: bound (1.5 s by default: a 503 then). The clients here retry a reconnect so many times
#: that, were the bound not what ends a call, it would take many minutes; so a call that
#: ends inside FAIL_WITHIN_S was ended by the bound, and a busy machine, which stretches
#: the 1.5 s a little, cannot stretch it that far.
RETRIES = 10_000
FAIL_WITHIN_S = 20.0


def turn(step: int) -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", f"step {step}"))


async def fails_fast(call: Callable[[], Awaitable[Any]], error: type[Exception]) -> None:
    start = time.monotonic()
    with pytest.raises(error):
        await call()
    assert time.monotonic() - start < FAIL_WITHIN_S, call


async def test_calls_fail_fast_while_redis_is_down_and_recover(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    url = private_redis.url
    async with (RedisRunStore(url, reconnect_retries=RETRIES) as store,
                RedisQueue(url, lease_s=30, reconnect_retries=RETRIES) as queue):
        record = RunRecord("o1", "agent", "x")
        await store.create(record)
        record.status = "running"
        await store.update(record)
        await queue.submit(QueueItem("o1", "agent"))
        (claim,) = await queue.claim("w1", block_s=0)
        private_redis.kill()
        store_calls = (
            lambda: store.get("o1"),
            lambda: store.journal("o1"),
            lambda: store.append("o1", [turn(0)]),
            lambda: store.update(record),
            lambda: store.create(RunRecord("o2", "agent", "x")),
            lambda: store.list(),
            lambda: store.cancel_requests(["o1"]),
            lambda: store.request_cancel("o1"),
        )
        queue_calls = (
            lambda: queue.submit(QueueItem("o2", "agent")),
            lambda: queue.claim("w1", block_s=0),
            lambda: queue.depth(),
            lambda: queue.heartbeat("w1", [claim]),
            lambda: queue.ack(claim),
        )
        await asyncio.gather(  # all at once, as many requests would be: each fails quickly
            *(fails_fast(call, StoreUnavailableError) for call in store_calls),
            *(fails_fast(call, QueueUnavailableError) for call in queue_calls),
        )
        private_redis.start()
        # the same objects work again: nothing to restart
        await store.append("o1", [turn(0)], record=record)
        await store.append("o1", [turn(1)])
        assert [seq for seq, _ in await store.journal("o1")] == [0, 1]
        assert await queue.heartbeat("w1", [claim]) == []
        await queue.ack(claim)
        assert await queue.outstanding() == 0
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_follower_rides_out_an_outage(private_redis: RedisServer) -> None:
    url = private_redis.url
    async with RedisRunStore(url) as writer, RedisRunStore(url) as reader:
        record = RunRecord("f1", "agent", "x")
        await writer.create(record)
        record.status = "running"
        await writer.update(record)
        following = asyncio.create_task(reader.wait_journal("f1", -1, 60.0))
        await asyncio.sleep(0.1)
        private_redis.kill()
        await asyncio.sleep(2.5)  # longer than any one call waits for Redis
        assert not following.done()
        private_redis.start()
        await writer.append("f1", [turn(0)])
        assert [seq for seq, _ in await following] == [0]
        # and with Redis still away when the wait ends: nothing, not an error
        private_redis.kill()
        assert await reader.wait_journal("f1", 0, 0.5) == []


async def test_a_store_on_another_database_reconnects_to_it(private_redis: RedisServer) -> None:
    url = private_redis.url.removesuffix("/0") + "/3"
    async with RedisRunStore(url) as store:
        await store.create(RunRecord("d1", "agent", "x"))
        private_redis.kill()
        private_redis.start()
        await store.create(RunRecord("d2", "agent", "x"))  # after the reconnect: SELECT 3 again
        assert {r.run_id for r in await store.list()} == {"d1", "d2"}
        assert await store.client.exists("podium:{d2}:run") == 1
