"""A worker SIGKILLed while it streams a run's answer: the run resumes on another worker,
which calls the model for that step again and streams it from its first token, after a
reset. Clients following the run never get two generations spliced: the run's SSE
events say ``reset`` and then bring the new call's text whole, and a streamed chat
completion, which cannot take text back, ends with a ``stream_reset`` error."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from .app import LONG_ANSWER
from .harness import WorkerProcess, redis_config, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_stream_crash"
AGENT = "tests.distributed.app:long_talky"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


def _worker(tmp_path: Path, name: str, redis: RedisServer) -> WorkerProcess:
    return WorkerProcess(
        tmp_path, name, redis.url, "podium", AGENT, tmp_path / "effects.log", "--lease", "1.5"
    )


async def _chat(
    client: httpx.AsyncClient, pieces: list[str], run_id: asyncio.Future[str], errors: list[str]
) -> None:
    """Follow a streamed chat completion: its content pieces go to ``pieces``, the type of
    an error chunk that ends it to ``errors``."""
    body = {"model": "long_talky", "stream": True,
            "messages": [{"role": "user", "content": "Where is A-1?"}]}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        run_id.set_result(r.headers["x-podium-run-id"])
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                errors.append(chunk["error"]["type"])
                continue
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                pieces.append(chunk["choices"][0]["delta"]["content"])


async def _events(client: httpx.AsyncClient, run_id: str, deltas: list[str],
                  replies: list[str]) -> None:
    """Follow the run's SSE events: the answer step's delta texts and model replies."""
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as r:
        assert r.status_code == 200
        name = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if name == "reset" and data.get("step") == 1:
                    deltas.clear()  # the documented rule: discard the step's deltas
                    deltas.append("")  # (one empty piece: a reset came)
                elif name == "delta" and data.get("step") == 1:
                    deltas.append(data.get("content", ""))
                elif name == "model_reply" and data.get("step") == 1:
                    replies.append(data["message"]["content"])
                elif name == "final":
                    return


async def test_a_worker_killed_mid_stream_leaves_clients_the_text_once(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    first = _worker(tmp_path, "w1", private_redis)
    second: WorkerProcess | None = None
    pieces: list[str] = []
    errors: list[str] = []
    deltas: list[str] = []
    replies: list[str] = []
    try:
        await first.wait_ready()
        async with httpx.AsyncClient(base_url=gateway, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=90) as client:
            run_id: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            chat = asyncio.create_task(_chat(client, pieces, run_id, errors))
            events = asyncio.create_task(_events(client, await run_id, deltas, replies))
            await wait_until(lambda: len(pieces) >= 3 and len(deltas) >= 3, 30,
                             "w1 to stream the answer")
            # A second worker, ready before w1 dies; it learns that the run has listeners
            # (as it would at the gateway's next announcement, every 5 s) at once.
            second = _worker(tmp_path, "w2", private_redis)
            await second.wait_ready()
            async with aioredis.Redis.from_url(private_redis.url) as redis:
                await redis.publish("podium:tokens:listen", await run_id)
            await asyncio.sleep(0.3)
            heard = "".join(pieces)
            # mid-stream (w2 streams the whole step again after the reset, wherever w1 was)
            assert len(heard) < len(LONG_ANSWER), "too slow to kill w1 mid-stream"
            assert LONG_ANSWER.startswith(heard)
            first.signal(signal.SIGKILL)
            assert await first.wait_exit() == -signal.SIGKILL
            await asyncio.wait_for(chat, 60)
            await asyncio.wait_for(events, 30)
        # the chat client was told its text is void, never given a splice
        assert errors == ["stream_reset"]
        assert LONG_ANSWER.startswith("".join(pieces))
        # the SSE client was told to discard, then w2 streamed the step again token by token
        assert deltas[0] == "" and len(deltas) > 10
        kept = "".join(deltas)
        assert kept == LONG_ANSWER[: len(kept)] and len(kept) > len(heard)
        assert replies == [LONG_ANSWER]
    finally:
        first.stop()
        if second is not None:
            second.stop()
