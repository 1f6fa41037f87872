"""Token streaming in the distributed mode: a `podium serve` gateway on Redis streams the
tokens a separate `podium worker` process publishes (Redis pub/sub), to SSE and to the
official openai SDK; a run nobody listens to is not streamed by the worker."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from serve_process import start_serve

from .app import TALKY_ANSWER
from .harness import ROOT, WorkerProcess, redis_config
from .redis_server import RedisServer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_stream_test"
AGENT = "tests.distributed.app:talky"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    port = free_port()
    serving = start_serve(
        ["--config", str(config), "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serving.stop()


async def test_tokens_travel_from_the_worker_process_to_the_clients(
    gateway: str, private_redis: RedisServer, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        tmp_path, "worker", private_redis.url, "podium", AGENT, tmp_path / "effects.log"
    )
    try:
        await worker.wait_ready()
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            events: list[dict[str, object]] = []
            body = {"agent": "talky", "input": "Where is A-1?", "stream": True}
            async with client.stream("POST", "/v1/runs", json=body) as r:
                assert r.status_code == 200
                name = ""
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        events.append({"event": name, "data": json.loads(line[6:])})
            names = [e["event"] for e in events]
            assert names[-1] == "final"
            answer = [e["data"] for e in events if e["event"] == "delta" and e["data"]["step"] == 1]  # type: ignore[index]
            assert len(answer) > 10
            # Pub/sub and the journal are two connections: a last token that crosses its
            # step's journal entry on the wire comes in the model_reply (never twice).
            streamed = "".join(d["content"] for d in answer)  # type: ignore[index]
            assert TALKY_ANSWER.startswith(streamed) and len(streamed) > len(TALKY_ANSWER) // 2
            # Each delta of the answer came before the answer's journaled reply.
            last_delta = max(i for i, e in enumerate(events) if e["event"] == "delta")
            assert last_delta < names.index("model_reply", names.index("step_finished"))

        chat = openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
        async with chat:
            stream = await chat.chat.completions.create(
                model="talky", messages=[{"role": "user", "content": "q"}], stream=True
            )
            pieces = []
            arrived = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    arrived.append(time.perf_counter())
        assert "".join(pieces) == TALKY_ANSWER and len(pieces) > 10
        assert arrived[-1] - arrived[0] > 0.1  # live, over the time the model took
    finally:
        worker.stop()


async def test_a_channel_that_found_redis_away_works_once_it_is_back(
    private_redis: RedisServer,
) -> None:
    from redis.exceptions import RedisError

    from podium.streaming import TokenDelta
    from podium.streaming.redis import RedisTokenChannel

    private_redis.kill()
    gateway = RedisTokenChannel(private_redis.url, prefix="podium")
    worker = RedisTokenChannel(private_redis.url, prefix="podium")
    try:
        with pytest.raises((RedisError, OSError)):
            await gateway.subscribe("run_a")
        private_redis.start()
        await worker.start()
        sub = await gateway.subscribe("run_a")
        async with asyncio.timeout(5):
            while not worker.listening("run_a"):  # noqa: ASYNC110 (an announcement in flight)
                await asyncio.sleep(0.001)
        worker.publish("run_a", TokenDelta(0, "back"))
        assert await asyncio.wait_for(sub.get(), 5) == [TokenDelta(0, "back")]
        sub.close()
    finally:
        await gateway.aclose()
        await worker.aclose()
