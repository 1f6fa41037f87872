"""Which number KEDA should scale a pool on, checked against a real Redis holding a real
Podium queue: the stream's length is the pool's outstanding work (waiting + in flight)
because Podium deletes an entry when its run is acked; the consumer group's pending
count sees only the runs in flight and its lag only the runs waiting."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import redis

from deploy.chart import render
from podium.queue import QueueItem, RedisQueue
from podium.queue.redis import queue_stream_key

POOL = "default"


def keda_figures(url: str, stream: str) -> dict[str, Any]:
    """What each redis-streams mode of KEDA reads: XLEN, XPENDING's count, XINFO's lag."""
    client = redis.Redis.from_url(url)
    try:
        [group] = client.xinfo_groups(stream)
        return {
            "streamLength": client.xlen(stream),
            "pendingEntriesCount": client.xpending(stream, "workers")["pending"],
            "lagCount": group.get("lag"),
        }
    finally:
        client.close()


async def queue_with(url: str, prefix: str, *, waiting: int, in_flight: int, done: int) -> int:
    """Submit ``waiting + in_flight + done`` runs, claim ``in_flight + done``, ack ``done``;
    returns the queue's own count of outstanding runs."""
    queue = RedisQueue(url, prefix=prefix)
    try:
        for i in range(waiting + in_flight + done):
            await queue.submit(QueueItem(f"run-{i}", "react", pool=POOL))
        claims = await queue.claim("worker-a", pool=POOL, count=in_flight + done, block_s=0)
        assert len(claims) == in_flight + done
        for claim in claims[:done]:
            await queue.ack(claim)
        return await queue.outstanding(POOL)
    finally:
        await queue.aclose()


def test_stream_length_is_the_outstanding_work(redis_url: str, prefix: str) -> None:
    outstanding = asyncio.run(queue_with(redis_url, prefix, waiting=5, in_flight=3, done=4))
    seen = keda_figures(redis_url, queue_stream_key(prefix, POOL))
    assert outstanding == 8
    assert seen["streamLength"] == 8  # acked runs are gone from the stream
    assert seen["pendingEntriesCount"] == 3  # only the runs in flight
    assert seen["lagCount"] in (5, None)  # only the runs waiting (None: Redis cannot tell)


def test_an_idle_pool_reads_zero_so_keda_can_scale_to_none(redis_url: str, prefix: str) -> None:
    assert asyncio.run(queue_with(redis_url, prefix, waiting=0, in_flight=0, done=3)) == 0
    assert keda_figures(redis_url, queue_stream_key(prefix, POOL))["streamLength"] == 0


def test_replicas_keda_asks_for() -> None:
    """KEDA's HPA wants ceil(metric / target) replicas: with the defaults (one process of
    256 runs a pod, 80 %), 1,000 outstanding runs ask for 5 pods, each then driving 200."""
    [scaled] = render({"redis": {"cidrs": ["10.0.0.0/8"]}}).of("ScaledObject")
    target = int(scaled["spec"]["triggers"][0]["metadata"]["streamLength"])
    assert target == 204
    assert math.ceil(1000 / target) == 5
    assert math.ceil(1 / target) == 1  # a single waiting run wakes a pod from zero
