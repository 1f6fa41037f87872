"""What KEDA's ``redis-streams`` scaler would read from a pool's stream, against what
Podium counts: a real Redis, the queue going through every move a run makes.

KEDA offers three readings of a stream and its consumer group:

- ``streamLength``: ``XLEN`` of the stream;
- ``pendingEntriesCount``: the count of ``XPENDING stream group`` (delivered, not acked);
- ``lagCount``: the group's ``lag`` in ``XINFO GROUPS`` (entries never delivered; Redis 7),
  or NULL when Redis cannot tell.

Podium deletes every entry it acks (and a hand-back is an ack, a delete and a fresh entry),
so the stream holds exactly the runs waiting or running: ``streamLength`` is waiting +
running, the figure a pool's workers should scale on. ``pendingEntriesCount`` is running
only (zero while runs wait and no worker is up: it never scales from zero), ``lagCount``
waiting only (it lets KEDA scale workers away under running runs), and Redis cannot
compute it after most acks (Podium deletes what it acks).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue, queue_stream_key

from .harness import serving
from .redis_server import RedisServer

pytestmark = pytest.mark.anyio

POOL = "support"
GROUP = "workers"  # the group Podium's queue reads with, named in the KEDA trigger
AGENT = "tests.distributed.app:one_step"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class KedaReading:
    """The three figures, read the way KEDA's scaler reads them."""

    def __init__(self, stream_length: int, pending: int, lag: int | None) -> None:
        self.stream_length, self.pending, self.lag = stream_length, pending, lag

    @classmethod
    async def of(cls, client: aioredis.Redis, stream: str) -> KedaReading:
        length = await client.xlen(stream)
        summary: Any = await client.xpending(stream, GROUP)  # {"pending": n, ...}
        groups: list[dict[Any, Any]] = await client.xinfo_groups(stream)
        [group] = [g for g in groups if g["name"] in (GROUP, GROUP.encode())]
        lag = group.get("lag")
        return cls(int(length), int(summary["pending"]), None if lag is None else int(lag))


async def _podium(queue: RedisQueue) -> tuple[int, int]:
    """(waiting, running) as the gateway's ``/metrics`` gauges report them: read at the
    scrape (``depth``), then taken from ``statistics``."""
    await queue.depth(POOL)
    stats = queue.statistics(POOL)
    return stats.waiting, stats.in_flight


async def _check(client: aioredis.Redis, queue: RedisQueue, waiting: int, running: int) -> None:
    keda = await KedaReading.of(client, queue_stream_key(queue.prefix, POOL))
    assert await _podium(queue) == (waiting, running)
    assert keda.stream_length == waiting + running  # the one to scale on
    assert keda.pending == running
    # Waiting runs only, where Redis can tell: it answers NULL once an entry at or after
    # the group's last delivered one was deleted (an ack of the newest run, a hand-back),
    # which is most of the time on a busy pool. Another reason not to scale on it.
    assert keda.lag in (None, waiting)


async def test_stream_length_is_waiting_plus_running(shared_redis_url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(shared_redis_url)
    async with RedisQueue(shared_redis_url, prefix=prefix, lease_s=0.2,
                          reclaim_every_s=0) as queue:
        try:
            for i in range(10):
                await queue.submit(QueueItem(f"run-{i}", "a", pool=POOL))
            await _check(client, queue, waiting=10, running=0)

            held = await queue.claim("worker-a", pool=POOL, count=4, block_s=0.1)
            assert len(held) == 4
            await _check(client, queue, waiting=6, running=4)

            await queue.ack(held[0])  # finished
            await _check(client, queue, waiting=6, running=3)

            await queue.release(held[1])  # handed back by a drain: waiting again
            await _check(client, queue, waiting=7, running=2)

            await queue.dead_letter(held[2], "test")  # out of the pool for good
            await _check(client, queue, waiting=7, running=1)

            # held[3]'s worker dies: its lease runs out and another worker takes it over
            # (XAUTOCLAIM): still one running, counted once. Bounded by time, not tries: a
            # pool whose clock is new opens the after-an-outage window (a lease + 2 s) first.
            taken: list[Any] = []
            give_up = time.monotonic() + 30
            while time.monotonic() < give_up:
                taken = await queue.claim("worker-b", pool=POOL, count=1, block_s=0.05)
                if any(c.item.run_id == held[3].item.run_id for c in taken):
                    break
                for c in taken:  # a fresh one meanwhile: give it back
                    await queue.release(c)
            else:
                pytest.fail("the expired lease was never taken over")
            await _check(client, queue, waiting=7, running=1)
            await queue.ack(taken[0])

            rest = await queue.claim("worker-b", pool=POOL, count=20, block_s=0.1)
            await _check(client, queue, waiting=7 - len(rest), running=len(rest))
            for c in rest:
                await queue.ack(c)
            await _check(client, queue, waiting=0, running=0)
        finally:
            await client.aclose()


def _gauge(text: str, name: str, pool: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and s.labels.get("pool") == pool)


@pytest.mark.slow
async def test_the_gateway_gauges_equal_the_stream_keda_reads(
    tmp_path: Path, private_redis: RedisServer
) -> None:
    """A real ``podium serve --redis``: runs admitted with no worker up, then two of them
    claimed; at each point its ``/metrics`` gauges add up to the stream's length, and the
    in-flight gauge is the group's pending count."""
    user, admin = "pk_keda_user", "pk_keda_admin"
    config = tmp_path / "podium.toml"
    config.write_text(
        f'[server]\nredis = "{private_redis.url}"\n\n[[agents]]\npath = "{AGENT}"\n'
        f'pool = "{POOL}"\n'
        f'\n[[keys]]\nkey = "{user}"\ntenant = "t1"\n'
        f'\n[[keys]]\nkey = "{admin}"\ntenant = "ops"\nadmin = true\n'
    )
    stream = queue_stream_key("podium", POOL)
    client = aioredis.Redis.from_url(private_redis.url)
    try:
        with serving(config, tmp_path / "serve.log") as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:

                async def check(waiting: int, running: int) -> None:
                    scraped = (await http.get(
                        "/metrics", headers={"Authorization": f"Bearer {admin}"})).text
                    keda = await KedaReading.of(client, stream)
                    gauges = (int(_gauge(scraped, "podium_queue_waiting", POOL)),
                              int(_gauge(scraped, "podium_queue_in_flight", POOL)))
                    assert gauges == (waiting, running)
                    assert keda.stream_length == sum(gauges) and keda.pending == gauges[1]

                for i in range(5):
                    r = await http.post("/v1/runs", headers={"Authorization": f"Bearer {user}"},
                                        json={"agent": "one_step", "input": str(i)})
                    assert r.status_code in (200, 201, 202), r.text
                await check(waiting=5, running=0)
                async with RedisQueue(private_redis.url) as queue:
                    held = await queue.claim("a-worker", pool=POOL, count=2, block_s=0.1)
                    assert len(held) == 2
                    await check(waiting=3, running=2)
    finally:
        await client.aclose()
