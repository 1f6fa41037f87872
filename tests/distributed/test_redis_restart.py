"""Redis is SIGKILLed and restarted under load: workers reconnect, every run completes once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .app import PARALLEL_CALLS, TOOL_STEPS
from .harness import WorkerProcess, check_completed_once, effect_lines, submit_runs, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    ("agent", "calls", "outage_s", "lease_s"),
    [
        ("effects", 1, 1.0, 5.0),
        ("parallel_effects", PARALLEL_CALLS, 3.0, 5.0),
    ],
    ids=["one-call", "parallel"],
)
async def test_workers_survive_a_redis_restart(
    private_redis: RedisServer,
    tmp_path: Path,
    agent: str,
    calls: int,
    outage_s: float,
    lease_s: float,
) -> None:
    """With parallel calls too: their outcomes, written together, survive the restart, and
    an outage longer than a gateway call waits (a worker waits longer) repeats no call."""
    effects = tmp_path / "effects.log"
    ids = [f"run-{i:03d}" for i in range(100)]
    url, prefix = private_redis.url, "podium"
    workers = [
        WorkerProcess(tmp_path, f"w{i}", url, prefix, f"tests.distributed.app:{agent}", effects,
                      "--concurrency", "16", "--lease", str(lease_s), "--burst", tool_delay=0.05)
        for i in range(2)
    ]
    store = RedisRunStore(url, prefix=prefix)
    queue = RedisQueue(url, prefix=prefix)
    try:
        for w in workers:
            await w.wait_ready()
        await submit_runs(store, queue, agent, ids)
        await wait_until(lambda: len(effect_lines(effects)) >= 120 * calls, 30,
                         "load to be under way")
        finished_before = {r.run_id: r for r in await store.list(status="completed", limit=1000)}
        journals_before = {i: len(await store.journal(i)) for i in finished_before}
        private_redis.kill()  # SIGKILL: only what the append-only file holds survives
        await asyncio.sleep(outage_s)  # the outage
        private_redis.start()
        for w in workers:
            assert await w.wait_exit(60) == 0, w.text()
        await check_completed_once(store, ids)
        assert await queue.outstanding() == 0
        for run_id, before in finished_before.items():  # nothing acknowledged was lost
            after = await store.get(run_id)
            assert after is not None and after.version == before.version
            assert len(await store.journal(run_id)) == journals_before[run_id]
        keys = Counter(k for k, _ in effect_lines(effects))
        assert set(keys) == {
            f"{r}:{s}:{c}" for r in ids for s in range(TOOL_STEPS) for c in range(calls)
        }
        assert all(n == 1 for n in keys.values()), [k for k, n in keys.items() if n > 1]
    finally:
        for w in workers:
            w.stop()
        await store.aclose()
        await queue.aclose()


async def test_an_outage_longer_than_the_lease_takes_no_run_from_a_live_worker(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """Redis counts an outage in every lease's idle time: an idle worker back first took its
    busy peer's runs before the peer's heartbeat landed, and the calls the peer finished
    as Redis went down ran again (found from the outside with a 3 s lease and a 3 s
    outage). Now no worker takes a run within a lease of its connection coming back."""
    effects = tmp_path / "effects.log"
    ids = [f"run-{i}" for i in range(8)]
    url, prefix, agent = private_redis.url, "podium", "tests.distributed.app:parallel_effects"
    args = ("--concurrency", "16", "--lease", "2", "--burst")
    busy = WorkerProcess(tmp_path, "busy", url, prefix, agent, effects, *args, tool_delay=0.4)
    store = RedisRunStore(url, prefix=prefix)
    queue = RedisQueue(url, prefix=prefix)
    idle: list[WorkerProcess] = []
    try:
        await busy.wait_ready()
        await submit_runs(store, queue, "parallel_effects", ids)
        await wait_until(lambda: len(effect_lines(effects)) >= len(ids) * PARALLEL_CALLS, 30,
                         "the busy worker's first step")  # it holds every run
        # Three idle workers: each reclaims every half lease or so, so one of them is sure
        # to look before the busy worker's first heartbeat after the restart.
        idle = [WorkerProcess(tmp_path, f"idle{i}", url, prefix, agent, effects, *args,
                              tool_delay=0.4) for i in range(3)]
        for w in idle:
            await w.wait_ready()
        await asyncio.sleep(0.2)  # mid-way through the second step's calls
        private_redis.kill()
        await asyncio.sleep(3.0)  # longer than the lease
        private_redis.start()
        for w in (busy, *idle):
            assert await w.wait_exit(60) == 0, w.text()
        await check_completed_once(store, ids)
        keys = Counter(k for k, _ in effect_lines(effects))
        assert all(n == 1 for n in keys.values()), [k for k, n in keys.items() if n > 1]
        assert len(keys) == len(ids) * TOOL_STEPS * PARALLEL_CALLS
    finally:
        for w in (busy, *idle):
            w.stop()
        await store.aclose()
        await queue.aclose()
