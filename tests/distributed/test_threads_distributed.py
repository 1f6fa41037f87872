"""Threads in the distributed mode: a `podium serve --redis` gateway, three `podium worker`
processes, one thread with four runs posted at once, and a worker SIGKILLed while it
drives one of them.

The runs must execute one after the other in the order they were posted (whichever worker
claims which), the killed worker's run must resume elsewhere from its checkpoint, and the
thread's history must hold every turn exactly once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .app import TOOL_STEPS
from .harness import WorkerProcess, effect_lines, redis_config, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_threads_test"
AGENT = "tests.distributed.app:effects"  # four side-effecting tool calls, then an answer
RUNS = 4


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


async def test_thread_runs_take_turns_across_workers_and_survive_a_sigkill(
    gateway: str, private_redis: RedisServer, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    workers = [
        WorkerProcess(tmp_path, f"w{i}", private_redis.url, "podium", AGENT, effects,
                      "--lease", "1.5", tool_delay=0.15)
        for i in range(3)
    ]
    try:
        for w in workers:
            await w.wait_ready()
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as client:
            r = await client.post("/v1/threads", json={})
            assert r.status_code == 201, r.text
            thread_id = r.json()["id"]
            inputs = [f"turn {i}" for i in range(RUNS)]
            ids = []
            for text in inputs:
                r = await client.post(
                    "/v1/runs", json={"agent": "effects", "input": text, "thread_id": thread_id}
                )
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])

            # Kill whichever worker is mid-way through a run (after the first run).
            def run_of(key: str) -> str:
                return key.split(":")[0]

            victim: list[WorkerProcess] = []

            def someone_mid_run() -> bool:
                lines = effect_lines(effects)
                for run_id in ids[1:]:
                    mine = [pid for key, pid in lines if run_of(key) == run_id]
                    if 0 < len(mine) < TOOL_STEPS:
                        victim.extend(w for w in workers if w.pid == mine[-1])
                        return True
                return False

            await wait_until(someone_mid_run, 60, "a worker mid-run on the thread")
            (killed,) = victim
            killed.signal(signal.SIGKILL)
            assert await killed.wait_exit() == -signal.SIGKILL

            async def all_done() -> bool:
                for run_id in ids:
                    body = (await client.get(f"/v1/runs/{run_id}")).json()
                    if body["status"] != "completed":
                        assert body["status"] in ("queued", "running"), body
                        return False
                return True

            await wait_until(all_done, 90, "every run on the thread to complete")
            thread = (await client.get(f"/v1/threads/{thread_id}")).json()

        # One run at a time, in the order posted: the effects come grouped by run, in order
        # (a call in flight when its worker died may appear twice, back to back).
        lines = effect_lines(effects)
        order = [run_of(key) for key, _ in lines]
        grouped = [run_id for i, run_id in enumerate(order) if i == 0 or order[i - 1] != run_id]
        assert grouped == ids, order
        by_key: dict[str, list[int]] = {}
        for key, pid in lines:
            by_key.setdefault(key, []).append(pid)
        assert set(by_key) == {f"{r}:{s}:0" for r in ids for s in range(TOOL_STEPS)}
        repeated = {k: pids for k, pids in by_key.items() if len(pids) > 1}
        assert len(repeated) <= 1, repeated  # at most the call the victim had in flight
        for pids in repeated.values():
            assert pids[0] == killed.pid != pids[1]

        # The thread holds every turn once, in order.
        assert thread["run_ids"] == ids
        assert (thread["turns"], thread["pending"]) == (RUNS, 0)
        messages = thread["messages"]
        assert [m["content"] for m in messages if m["role"] == "user"] == inputs
        finals = [m for m in messages if m["role"] == "assistant" and not m.get("tool_calls")]
        assert len(finals) == RUNS
        assert sum(m["role"] == "tool" for m in messages) == RUNS * TOOL_STEPS
    finally:
        for w in workers:
            w.stop()
