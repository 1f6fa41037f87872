"""The process's one blocking read of every followed journal (``JournalWaiter``): it wakes
the followers whose stream moved, takes in a follower that arrives while it blocks, and
stops reading once nobody follows."""

from __future__ import annotations

import asyncio

import pytest

from podium.store.redis import connect
from podium.store.redis_follow import JournalWaiter

from .harness import wait_until

pytestmark = pytest.mark.anyio


async def test_followers_wake_when_their_stream_moves_and_leave_nothing_blocked(
    shared_redis_url: str, prefix: str
) -> None:
    client = connect(shared_redis_url)
    # A block far longer than the test's bounds: a newcomer is woken by CLIENT UNBLOCK,
    # not by the block running out.
    waiter = JournalWaiter(client, block_s=60.0)
    first, second = f"{prefix}:a", f"{prefix}:b"
    try:
        start_a = await client.xadd(first, {"e": b""})
        start_b = await client.xadd(second, {"e": b""})
        waiting_a = asyncio.create_task(waiter.wait(first, start_a, 30))
        await wait_until(lambda: waiter._reading.get(first) is not None, 10, "the read")
        # arrives while the read blocks on the first stream only
        waiting_b = asyncio.create_task(waiter.wait(second, start_b, 30))
        await wait_until(lambda: second in waiter._reading, 10, "the newcomer taken in")
        await client.xadd(second, {"e": b"1"})
        assert await waiting_b  # woken by its stream, long before the block's end
        assert not waiting_a.done()
        last = await client.xadd(first, {"e": b"1"})
        assert await waiting_a
        # nobody follows now: a follower that times out or is cancelled leaves no read
        gone = asyncio.create_task(waiter.wait(first, last, 30))
        await wait_until(lambda: first in waiter._reading, 10, "the read")
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert await waiter.wait(first, last, 0.05) is False
        await wait_until(lambda: waiter._task is not None and waiter._task.done(), 10,
                         "the reader to stop")
        assert waiter._reader is None
    finally:
        await waiter.aclose()
        await client.delete(first, second)
        await client.aclose()
