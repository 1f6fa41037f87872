"""A Redis at ``maxclients`` refuses a connection by writing its error in place of any
reply and hanging up. Every caller waiting for that connection must learn so, with the
server's reason, within the pipeline's patience (never a hang, never a vaguer "not
connected"), and the pipeline must connect again once the server has room.

The refusal is written as soon as the server accepts, so it can arrive before the
pipeline's handshake has sent its PING: a reply nobody asked for yet. That is the race
pinned here, on a ``redis-server`` of the test's own (a full server would refuse every
other test's connections too).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from podium.store.redis_batch import Autopipeline

from .harness import wait_until
from .redis_server import RedisServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server"),
]

MAX_CLIENTS = "max number of clients reached"


class Full:
    """A private redis-server whose one client slot ``admin`` holds."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.admin = redis.Redis(host="127.0.0.1", port=server.port, single_connection_client=True)
        self.admin.config_set("maxclients", 1)  # from now on every new connection is refused

    def pipeline(self, **options: float) -> Autopipeline:
        return Autopipeline(aioredis.Redis(host="127.0.0.1", port=self.server.port), **options)

    def rejected(self) -> int:
        return int(self.admin.info("stats")["rejected_connections"])

    def make_room(self) -> None:
        self.admin.config_set("maxclients", 100)


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Full]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        full = Full(server)
        yield full
        full.admin.close()
    finally:
        server.stop()


async def test_every_caller_waiting_on_a_full_server_learns_why_in_time(full: Full) -> None:
    """Many pipelines at once, each with several callers: each connection attempt races
    the server's refusal against the handshake, and every caller gets the refusal."""
    # A second of patience, not less: 30 connections refused at once on a loaded 2-core
    # machine can take longer than 0.2 s to be read, and a caller whose patience ran out
    # before its refusal arrived is told "unavailable", not the server's reason.
    pipes = [full.pipeline(unavailable_s=1.0) for _ in range(30)]
    start = time.monotonic()
    try:
        async with asyncio.timeout(10):  # a caller left hanging fails here, not at 120 s
            results = await asyncio.gather(
                *(pipe.execute("GET", f"k{i}") for pipe in pipes for i in range(5)),
                return_exceptions=True,
            )
    finally:
        for pipe in pipes:
            await pipe.aclose()
    assert full.rejected() >= len(pipes)
    for result in results:
        assert isinstance(result, RedisConnectionError), result
        assert MAX_CLIENTS in str(result), result
    assert time.monotonic() - start < 5  # patience is 1 s: nothing waited for long


async def test_a_refused_pipeline_connects_again_once_the_server_has_room(full: Full) -> None:
    pipe = full.pipeline(unavailable_s=0.2)
    try:
        with pytest.raises(RedisConnectionError, match=MAX_CLIENTS):
            await pipe.execute("PING")
        full.make_room()
        async with asyncio.timeout(10):
            assert await pipe.execute("PING") == b"PONG"  # the next command connects
            assert await pipe.execute_all(("SET", "k", "v"), ("GET", "k")) == [b"OK", b"v"]
    finally:
        await pipe.aclose()


async def test_callers_waiting_on_a_full_server_are_answered_once_it_has_room(
    full: Full,
) -> None:
    """Within their patience, callers wait through refusals and get their replies (each
    once: a refused connection carried none of their commands)."""
    pipe = full.pipeline(unavailable_s=30)
    try:
        calls = [asyncio.ensure_future(pipe.execute("INCR", "n")) for _ in range(5)]
        # refused, and refused again after a backoff
        await wait_until(lambda: full.rejected() >= 2, 10, "two refused connections")
        assert not any(call.done() for call in calls)
        full.make_room()
        async with asyncio.timeout(10):
            assert sorted(await asyncio.gather(*calls)) == [1, 2, 3, 4, 5]
        assert full.admin.get("n") == b"5"
    finally:
        await pipe.aclose()
