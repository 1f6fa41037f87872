"""Every token channel behaves alike: in-process, and Redis pub/sub between two handles (a
worker's and a gateway's, as if in two processes)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from podium.streaming import LocalTokenChannel, TokenChannel, TokenDelta, TokenSubscription
from redis_fixtures import REDIS_URL, delete_prefix, redis_reachable

pytestmark = pytest.mark.anyio

needs_redis = pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")


@dataclass
class Pair:
    """The publishing side (a worker's engine) and the listening side (a gateway)."""

    worker: TokenChannel
    gateway: TokenChannel

    async def until_listening(self, run_id: str, wanted: bool = True) -> None:
        # Redis carries the announcement asynchronously: bounded wait, in loop turns.
        async with asyncio.timeout(5):
            while self.worker.listening(run_id) != wanted:  # noqa: ASYNC110 (no event to await)
                await asyncio.sleep(0.001)


@pytest.fixture(params=["local", pytest.param("redis", marks=needs_redis)])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    if request.param == "local":
        channel = LocalTokenChannel()
        yield Pair(channel, channel)
        return
    from podium.streaming.redis import RedisTokenChannel

    prefix = f"podium-conf-{uuid.uuid4().hex[:10]}"
    worker = RedisTokenChannel(REDIS_URL, prefix=prefix, announce_s=0.2)
    gateway = RedisTokenChannel(REDIS_URL, prefix=prefix, announce_s=0.2)
    await worker.start()
    try:
        yield Pair(worker, gateway)
    finally:
        await gateway.aclose()
        await worker.aclose()
        delete_prefix(REDIS_URL, prefix)


async def received(sub: TokenSubscription, count: int) -> list[TokenDelta]:
    got: list[TokenDelta] = []
    async with asyncio.timeout(5):
        while len(got) < count:
            got.extend(await sub.get())
    return got


async def test_nobody_listens_until_a_subscription(pair: Pair) -> None:
    assert not pair.worker.listening("run_a")
    pair.worker.publish("run_a", TokenDelta(0, "lost"))  # to nobody: dropped, no error
    sub = await pair.gateway.subscribe("run_a")
    await pair.until_listening("run_a")
    assert not pair.worker.listening("run_b")
    sub.close()


async def test_deltas_arrive_in_order_to_every_listener_of_the_run(pair: Pair) -> None:
    first = await pair.gateway.subscribe("run_a")
    second = await pair.gateway.subscribe("run_a")
    other = await pair.gateway.subscribe("run_b")
    await pair.until_listening("run_a")
    words = [TokenDelta(0, w) for w in ("The", " answer", " is", " 42.")]
    words.append(TokenDelta(1, tool_call_index=0, tool_name="lookup"))
    words.append(TokenDelta(1, tool_call_index=0, arguments='{"q": 1}', offset=6))  # kept
    for delta in words:
        pair.worker.publish("run_a", delta)
    assert await received(first, len(words)) == words
    assert await received(second, len(words)) == words
    pair.worker.publish("run_b", TokenDelta(3, "b"))
    assert await received(other, 1) == [TokenDelta(3, "b")]
    for sub in (first, second, other):
        sub.close()


async def test_the_last_listener_leaving_stops_the_streaming(pair: Pair) -> None:
    sub = await pair.gateway.subscribe("run_a")
    await pair.until_listening("run_a")
    sub.close()
    sub.close()  # twice is harmless
    # The worker learns it from the next publish that reaches nobody.
    pair.worker.publish("run_a", TokenDelta(0, "into the void"))
    await pair.until_listening("run_a", wanted=False)


async def test_a_listener_that_falls_behind_keeps_a_prefix_of_each_step() -> None:
    sub = TokenSubscription("run_a", lambda _: None, limit=3)
    sub.feed([TokenDelta(0, c) for c in "abcde"])
    sub.feed([TokenDelta(0, "f")])
    assert "".join(d.content for d in await sub.get()) == "abc"  # never "abcf"
    sub.feed([TokenDelta(0, "g"), TokenDelta(1, "x"), TokenDelta(1, "y")])
    assert [(d.step, d.content) for d in await sub.get()] == [(1, "x"), (1, "y")]
