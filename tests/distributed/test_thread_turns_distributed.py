"""A thread's runs behind a run parked on a human, on Redis with a real `podium worker`
of concurrency 1: each decision finds the slot (the runs waiting for their turn lend
theirs back), and the runs complete one after the other, in the order posted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .harness import WorkerProcess, redis_config, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_thread_turns_test"
AGENT = "tests.distributed.app:approvals"  # each run asks a human before its payout


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


async def test_parked_runs_on_a_thread_do_not_stall_a_one_slot_worker(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    worker = WorkerProcess(
        tmp_path, "w1", private_redis.url, "podium", AGENT, tmp_path / "effects.log",
        "--concurrency", "1",
    )
    try:
        await worker.wait_ready()
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            thread_id = (await client.post("/v1/threads", json={})).json()["id"]
            ids = []
            for i in range(3):
                body = {"agent": "approvals", "input": f"pay {i}", "thread_id": thread_id}
                r = await client.post("/v1/runs", json=body)
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])

            async def status(run_id: str) -> str:
                return str((await client.get(f"/v1/runs/{run_id}")).json()["status"])

            for n, run_id in enumerate(ids):
                async def parked(run_id: str = run_id) -> bool:
                    return await status(run_id) == "waiting"

                await wait_until(parked, 20, f"run {n} to ask for approval")
                assert [await status(r) for r in ids[n + 1:]] == ["queued"] * (2 - n)
                (call,) = (await client.get(f"/v1/runs/{run_id}/approvals")).json()["data"]
                url = f"/v1/runs/{run_id}/approvals/{call['call_id']}"
                assert (await client.post(url, json={"decision": "approve"})).status_code == 200

                async def completed(run_id: str = run_id) -> bool:
                    return await status(run_id) == "completed"

                await wait_until(completed, 20, f"approved run {n} to complete")
            thread = (await client.get(f"/v1/threads/{thread_id}")).json()
        assert thread["run_ids"] == ids and (thread["turns"], thread["pending"]) == (3, 0)
        users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
        assert users == ["pay 0", "pay 1", "pay 2"]
    finally:
        worker.stop()
