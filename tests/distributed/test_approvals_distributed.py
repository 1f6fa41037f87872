"""Human approval on Redis with real processes: a `podium serve --redis` gateway and
`podium worker` subprocesses. The run waits with no worker holding it; its worker is
SIGKILLed; the approval, sent over HTTP, resumes it on another worker, and no completed
tool call runs twice. A run whose deadline passes while it waits fails without a worker
driving it (a worker's sweep ends it)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .harness import WorkerProcess, effect_lines, redis_config, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_approvals_test"
AGENTS = ("tests.distributed.app:approvals", "tests.distributed.app:approvals_short")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    keys = {KEY: "t1", f"{KEY}-other": "t2"}
    config = redis_config(tmp_path, private_redis.url, AGENTS, keys)
    with serving(config, tmp_path / "serve.log") as url:
        yield url


def _worker(tmp_path: Path, name: str, redis: RedisServer, effects: Path) -> WorkerProcess:
    return WorkerProcess(
        tmp_path, name, redis.url, "podium", AGENTS[0], effects,
        "--agent", AGENTS[1], "--lease", "1.5",
    )


async def test_sigkill_while_waiting_then_approve_resumes_elsewhere(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    effects = tmp_path / "effects.log"
    first = _worker(tmp_path, "w1", private_redis, effects)
    second: WorkerProcess | None = None
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        await first.wait_ready()
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            r = await client.post(
                "/v1/runs",
                json={"agent": "approvals", "input": "pay", "wait": True, "wait_timeout_s": 20},
            )
            run = r.json()
            assert r.status_code == 202 and run["status"] == "waiting", r.text
            (pending,) = (await client.get("/v1/approvals")).json()["data"]
            assert (pending["run_id"], pending["tool"]) == (run["id"], "payout")
            assert [key for key, _ in effect_lines(effects)] == [f"{run['id']}:0:0"]

            first.signal(signal.SIGKILL)  # the run waits: nothing of it is lost with w1
            assert await first.wait_exit() == -signal.SIGKILL

            url = f"/v1/runs/{run['id']}/approvals/{pending['call_id']}"
            other = {"Authorization": f"Bearer {KEY}-other"}
            assert (await client.post(url, json={"decision": "approve"}, headers=other)
                    ).status_code == 404
            decided = await client.post(url, json={"decision": "approve", "by": "alice"})
            assert decided.status_code == 200 and decided.json()["status"] == "queued"
            assert (await client.post(url, json={"decision": "approve"})).status_code == 409

            second = _worker(tmp_path, "w2", private_redis, effects)
            await second.wait_ready()

            async def completed() -> bool:
                got = (await client.get(f"/v1/runs/{run['id']}")).json()
                return bool(got["status"] == "completed")

            await wait_until(completed, 30, "the approved run to complete on w2")
            events = (await client.get(f"/v1/runs/{run['id']}/events")).text
            assert "event: approval_requested" in events and "event: approval_decided" in events
        lines = effect_lines(effects)
        assert [key for key, _ in lines] == [f"{run['id']}:0:0", f"{run['id']}:0:1"]
        assert lines[0][1] == first.pid and lines[1][1] == second.pid  # nothing ran twice
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_deadline_passes_while_waiting_with_no_worker_driving(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    worker = _worker(tmp_path, "w1", private_redis, tmp_path / "effects.log")
    try:
        await worker.wait_ready()
        async with httpx.AsyncClient(
            base_url=gateway, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        ) as client:
            r = await client.post(
                "/v1/runs", json={"agent": "approvals_short", "input": "pay", "wait": True}
            )
            run = r.json()
            assert run["status"] == "waiting", r.text

            async def failed() -> bool:
                got = (await client.get(f"/v1/runs/{run['id']}")).json()
                return bool(got["status"] == "failed")

            await wait_until(failed, 20, "the waiting run to fail at its deadline")
            got = (await client.get(f"/v1/runs/{run['id']}")).json()
            assert got["reason"] == "deadline"
            assert (await client.get("/v1/approvals")).json()["data"] == []
    finally:
        worker.stop()
