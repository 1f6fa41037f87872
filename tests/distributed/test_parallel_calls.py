"""Parallel tool calls of one reply on the Redis store: each outcome journaled once, nothing re-run.

Four calls per step finish in the same loop turn, so their ``ToolOutcome``
appends reach the store together. They must all land (one holder's appends of
one run are serialized), the run must complete on its first delivery, and no
call may be executed twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from podium.engine.driver import Engine
from podium.engine.records import ToolOutcome
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .app import PARALLEL_CALLS, TOOL_STEPS, parallel_effects
from .harness import check_completed_once, effect_lines, submit_runs

pytestmark = pytest.mark.anyio


async def test_parallel_calls_finishing_together(
    shared_redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects_log = tmp_path / "effects.log"
    monkeypatch.setenv("PODIUM_TEST_EFFECTS", str(effects_log))
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.01")  # one delay: the calls end together
    ids = [f"p{i}" for i in range(5)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        # a short lease, so a run wrongly left un-acked comes back (and fails the test) quickly
        RedisQueue(shared_redis_url, prefix=prefix, lease_s=1.0, reclaim_every_s=0) as queue,
    ):
        await submit_runs(store, queue, "parallel_effects", ids)
        worker = Worker(queue, Engine(store), {"parallel_effects": parallel_effects},
                        concurrency=8, claim_block_s=0.05, heartbeat_s=0.3)
        await worker.run(burst=True)
        stats = worker.statistics()
        assert (stats.completed, stats.lost, stats.dead_lettered) == (5, 0, 0)
        assert await queue.dead_letters() == []
        await check_completed_once(store, ids)
        for run_id in ids:
            outcomes = Counter(
                (e.step, e.index)
                for _, e in await store.journal(run_id)
                if isinstance(e, ToolOutcome)
            )
            assert outcomes == {(s, c): 1 for s in range(TOOL_STEPS) for c in range(PARALLEL_CALLS)}
        executed = Counter(key for key, _ in effect_lines(effects_log))
        assert executed == {
            f"{r}:{s}:{c}": 1 for r in ids for s in range(TOOL_STEPS) for c in range(PARALLEL_CALLS)
        }
