"""SIGTERM drains a real worker subprocess: running steps finish, nothing is lost or redone."""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .app import TOOL_STEPS
from .harness import WorkerProcess, check_completed_once, effect_lines, submit_runs, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _stats(text: str) -> dict[str, int]:
    match = re.search(r" done (\{.*\})", text)
    assert match, text
    stats: dict[str, int] = json.loads(match.group(1))
    return stats


async def test_sigterm_drain_loses_no_step(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    ids = [f"run-{i:02d}" for i in range(24)]
    agent = "tests.distributed.app:effects"
    first = WorkerProcess(tmp_path, "first", shared_redis_url, prefix, agent, effects,
                          "--concurrency", "24", "--grace", "5", tool_delay=0.2)
    try:
        await first.wait_ready()
        async with (
            RedisRunStore(shared_redis_url, prefix=prefix) as store,
            RedisQueue(shared_redis_url, prefix=prefix) as queue,
        ):
            await submit_runs(store, queue, "effects", ids)
            await wait_until(lambda: len(effect_lines(effects)) >= 24, 20, "every run to start")
            first.signal(signal.SIGTERM)
            assert await first.wait_exit(10) == 0, first.text()
            stats = _stats(first.text())
            assert stats["released"] > 0 and stats["completed"] < len(ids), stats
            progress = Counter(k.split(":")[0] for k, _ in effect_lines(effects))
            assert all(0 < n < TOOL_STEPS for n in progress.values()), progress

            second = WorkerProcess(tmp_path, "second", shared_redis_url, prefix, agent, effects,
                                   "--burst", tool_delay=0.01)
            try:
                assert await second.wait_exit(30) == 0, second.text()
            finally:
                second.stop()
            await check_completed_once(store, ids)
            assert await queue.outstanding() == 0
        keys = Counter(k for k, _ in effect_lines(effects))
        assert set(keys) == {f"{r}:{s}:0" for r in ids for s in range(TOOL_STEPS)}
        assert all(n == 1 for n in keys.values())  # no step ran twice, none was lost
    finally:
        first.stop()
