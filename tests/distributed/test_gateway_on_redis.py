"""The distributed mode end to end: a stateless `podium serve --redis` gateway and a separate
`podium worker` process, sharing nothing but Redis.

The gateway only admits and records runs; the worker drives them; the gateway streams the
run's events live from Redis while another process writes them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .harness import WorkerProcess, redis_config, serving
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_distributed_test"
AGENT = "podium.examples.react:agent"
SLOW = "tests.distributed.app:effects"  # four side-effecting tool calls, each as slow as we say


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT, SLOW], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


async def test_gateway_admits_worker_drives_gateway_streams(
    gateway: str, private_redis: RedisServer, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        tmp_path, "worker", private_redis.url, "podium", AGENT, tmp_path / "effects.log"
    )
    try:
        await worker.wait_ready()
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            ready = (await client.get("/readyz")).json()
            assert ready["status"] == "ready", ready
            names: list[str] = []
            final: dict[str, object] = {}
            async with client.stream(
                "POST", "/v1/runs", json={"agent": "react", "input": "hi", "stream": True}
            ) as r:
                assert r.status_code == 200
                event = ""
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                        names.append(event)
                    elif line.startswith("data: ") and event == "final":
                        final = json.loads(line[6:])
            assert "delta" in names  # the worker streamed the tokens to this gateway
            names = [n for n in names if n != "delta"]
            assert names[0] == "model_reply" and names[-1] == "final"
            assert names.count("tool_result") == 6
            assert final["status"] == "completed"
            listed = (await client.get("/v1/runs", params={"status": "completed"})).json()
            ids = [run["id"] for run in listed["data"]]
            assert len(ids) == 1
            got = (await client.get(f"/v1/runs/{ids[0]}")).json()
            assert got["status"] == "completed" and got["steps"] == 7
            assert got["output"].startswith("Podium: 42 items")
    finally:
        worker.stop()


async def test_cancel_reaches_the_worker_on_another_process(
    gateway: str, private_redis: RedisServer, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    worker = WorkerProcess(
        tmp_path, "worker", private_redis.url, "podium", SLOW, effects, tool_delay=0.3
    )
    try:
        await worker.wait_ready()
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            run = (await client.post("/v1/runs", json={"agent": "effects", "input": "go"})).json()
            # wait until the worker has done one side effect: the run is mid-flight there
            for _ in range(400):
                if effects.exists() and effects.read_text().strip():
                    break
                await asyncio.sleep(0.025)
            r = await client.post(f"/v1/runs/{run['id']}/cancel")
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["status"] == "cancelled" and body["reason"] == "cancelled"
            assert body["steps"] < 4  # it did not run to the end
            done = len(effects.read_text().splitlines())
            await asyncio.sleep(0.6)  # two tool delays: a run still going would add a line
            assert len(effects.read_text().splitlines()) == done
            again = await client.post(f"/v1/runs/{run['id']}/cancel")
            assert again.status_code == 409
    finally:
        worker.stop()
