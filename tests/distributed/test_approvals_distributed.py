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
AGENTS = (
    "tests.distributed.app:approvals",
    "tests.distributed.app:approvals_short",
    "tests.distributed.app:approvals_then_more",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    keys = {KEY: "t1", f"{KEY}-other": "t2"}
    config = redis_config(tmp_path, private_redis.url, AGENTS, keys)
    with serving(config, tmp_path / "serve.log") as url:
        yield url


def _worker(
    tmp_path: Path,
    name: str,
    redis: RedisServer,
    effects: Path,
    tool_delay: float = 0.02,
    starts: Path | None = None,
) -> WorkerProcess:
    return WorkerProcess(
        tmp_path, name, redis.url, "podium", AGENTS[0], effects,
        "--agent", AGENTS[1], "--agent", AGENTS[2], "--lease", "1.5", tool_delay=tool_delay,
        starts=starts,
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


async def test_a_cancel_after_an_approval_waits_for_the_run_to_end(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    """The gateway follows the run's journal from its start for a cancel's (or a wait's)
    end: the request for a human decided long ago ended the follow at once, and the cancel
    answered 202 "running" in 2 ms though the run ended cancelled a moment later."""
    starts = tmp_path / "starts.log"
    worker = _worker(tmp_path, "w1", private_redis, tmp_path / "effects.log", tool_delay=3.0,
                     starts=starts)
    try:
        await worker.wait_ready()
        async with httpx.AsyncClient(
            base_url=gateway, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        ) as client:
            r = await client.post("/v1/runs", json={
                "agent": "approvals_then_more", "input": "pay", "wait": True,
                "wait_timeout_s": 20})
            run = r.json()
            assert run["status"] == "waiting", r.text
            (pending,) = (await client.get(f"/v1/runs/{run['id']}/approvals")).json()["data"]
            decided = await client.post(
                f"/v1/runs/{run['id']}/approvals/{pending['call_id']}",
                json={"decision": "approve"})
            assert decided.status_code == 200, decided.text

            def in_its_next_steps_call() -> bool:  # (3 s long)
                return starts.exists() and f"{run['id']}:1:0" in starts.read_text()

            await wait_until(in_its_next_steps_call, 20, "the approved run's next call")
            cancelled = await client.post(f"/v1/runs/{run['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
    finally:
        worker.stop()


async def test_a_run_cancelled_while_it_waits_leaves_no_submitted_version(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    """A waiting run has no item in the queue to ack: cancelled there, its
    PREFIX:submitted:RUN key stayed for 7 days (17 after a probe's batch)."""
    import redis

    worker = _worker(tmp_path, "w1", private_redis, tmp_path / "effects.log")
    try:
        await worker.wait_ready()
        async with httpx.AsyncClient(
            base_url=gateway, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        ) as client:
            r = await client.post("/v1/runs", json={"agent": "approvals", "input": "pay",
                                                     "wait": True, "wait_timeout_s": 20})
            run = r.json()
            assert run["status"] == "waiting", r.text
            cancelled = await client.post(f"/v1/runs/{run['id']}/cancel")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        with redis.Redis.from_url(private_redis.url) as client_:
            assert client_.exists(f"podium:submitted:{run['id']}") == 0
    finally:
        worker.stop()
