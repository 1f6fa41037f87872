"""RedisQueue against the machine's Redis: leases, reclaim, heartbeats, release, dead letters."""

from __future__ import annotations

import asyncio

import pytest

from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue

pytestmark = pytest.mark.anyio


async def test_submit_claim_ack(shared_redis_url: str, prefix: str) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=5) as q:
        for i in range(3):
            await q.submit(QueueItem(f"r{i}", "agent", pool="support"))
        assert await q.depth("support") == 3
        claims = await q.claim("w1", pool="support", count=2, block_s=0)
        assert [c.item.run_id for c in claims] == ["r0", "r1"]
        assert all(c.deliveries == 1 and c.consumer == "w1" for c in claims)
        assert await q.depth("support") == 1 and await q.outstanding("support") == 3
        for c in claims:
            await q.ack(c)
        assert await q.outstanding("support") == 1
        assert await q.depth("codegen") == 0  # pools are separate streams
        assert await q.claim("w1", pool="codegen", block_s=0) == []


async def test_claim_blocks_until_submit(shared_redis_url: str, prefix: str) -> None:
    async with (
        RedisQueue(shared_redis_url, prefix=prefix) as a,
        RedisQueue(shared_redis_url, prefix=prefix) as b,
    ):
        await a.depth()  # creates the group
        waiting = asyncio.create_task(a.claim("w1", block_s=5))
        await asyncio.sleep(0.05)
        await b.submit(QueueItem("r1", "agent"))
        claims = await waiting
        assert [c.item.run_id for c in claims] == ["r1"]


async def test_expired_lease_is_reclaimed_with_delivery_count(
    shared_redis_url: str, prefix: str
) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.2, reclaim_every_s=0) as q:
        await q.submit(QueueItem("r1", "agent"))
        (first,) = await q.claim("dead-worker", block_s=0)
        assert await q.claim("w2", block_s=0) == []  # lease still valid
        await asyncio.sleep(0.3)
        (second,) = await q.claim("w2", block_s=0)
        assert second.item.run_id == "r1" and second.deliveries == 2
        assert second.receipt == first.receipt
        # the dead worker's heartbeat finds it lost the run and does not steal it back
        lost = await q.heartbeat("dead-worker", [first])
        assert lost == [first]
        assert await q.heartbeat("w2", [second]) == []
        await asyncio.sleep(0.3)
        (third,) = await q.claim("w3", block_s=0)
        assert third.deliveries == 3


async def test_heartbeat_keeps_the_lease(shared_redis_url: str, prefix: str) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.3, reclaim_every_s=0) as q:
        await q.submit(QueueItem("r1", "agent"))
        claims = await q.claim("w1", block_s=0)
        for _ in range(4):
            await asyncio.sleep(0.15)
            assert await q.heartbeat("w1", claims) == []
            assert await q.claim("w2", block_s=0) == []


async def test_release_hands_over_without_counting(shared_redis_url: str, prefix: str) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.2, reclaim_every_s=0) as q:
        await q.submit(QueueItem("r1", "agent"))
        (claim,) = await q.claim("w1", block_s=0)
        await q.release(claim)
        (again,) = await q.claim("w2", block_s=0)
        assert again.item.run_id == "r1" and again.deliveries == 1
        assert await q.outstanding() == 1
        # a worker that lost the run cannot release it (that would duplicate it)
        await asyncio.sleep(0.3)
        (taken,) = await q.claim("w3", block_s=0)
        assert taken.deliveries == 2
        await q.release(again)
        assert await q.outstanding() == 1


async def test_dead_letter(shared_redis_url: str, prefix: str) -> None:
    async with RedisQueue(shared_redis_url, prefix=prefix) as q:
        await q.submit(QueueItem("r1", "agent", pool="p"))
        (claim,) = await q.claim("w1", pool="p", block_s=0)
        await q.dead_letter(claim, "crashed its worker 3 times")
        assert await q.outstanding("p") == 0
        (dead,) = await q.dead_letters("p")
        assert dead.item.run_id == "r1" and dead.reason == "crashed its worker 3 times"
        assert q.statistics("p").dead_lettered == 1
