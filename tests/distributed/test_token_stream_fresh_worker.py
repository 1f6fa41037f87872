"""A worker started after the client began listening streams its first run's tokens: it
learns the current listeners when it starts, not from their next announcement (every
5 s, by when a short run has ended unstreamed)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .app import TALKY_ANSWER
from .harness import WorkerProcess, redis_config, serving
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_fresh_worker"
AGENT = "tests.distributed.app:talky"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


async def test_a_restarted_worker_streams_its_first_run(
    gateway: str, private_redis: RedisServer, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    first = WorkerProcess(tmp_path, "first", private_redis.url, "podium", AGENT, effects)
    try:
        await first.wait_ready()
        first.signal(signal.SIGTERM)  # the restart: this one goes, a fresh one comes
        assert await first.wait_exit(30) == 0, first.text()
    finally:
        first.stop()
    headers = {"Authorization": f"Bearer {KEY}"}
    events: list[tuple[str, dict[str, object]]] = []
    listening = asyncio.Event()
    async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=60) as client:

        async def follow() -> None:
            body = {"agent": "talky", "input": "Where is A-1?", "stream": True}
            async with client.stream("POST", "/v1/runs", json=body) as r:
                assert r.status_code == 200
                listening.set()  # headers come once the gateway listens and the run is queued
                name = ""
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        events.append((name, json.loads(line[6:])))

        following = asyncio.create_task(follow())
        await asyncio.wait_for(listening.wait(), 30)
        second = WorkerProcess(tmp_path, "second", private_redis.url, "podium", AGENT, effects)
        try:
            await second.wait_ready()
            await asyncio.wait_for(following, 60)
        finally:
            second.stop()
    names = [name for name, _ in events]
    assert names[-1] == "final", names
    answer = "".join(
        str(data["content"]) for name, data in events if name == "delta" and data["step"] == 1
    )
    assert len(answer) > len(TALKY_ANSWER) // 2 and TALKY_ANSWER.startswith(answer), names
