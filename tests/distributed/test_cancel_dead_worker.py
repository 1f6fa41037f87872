"""A cancel asked for while the run's worker is dead: the worker that takes the run over
ends it ``cancelled`` before any of its calls starts again.

The gateway leaves a cancel request for a ``running`` run where its worker looks; when
that worker was SIGKILLed, nobody reads it until the lease runs out and another worker
claims the run. That worker must adopt the cancel, not resume the step (found from the
outside: it started all the step's calls again, then cancelled them half a second later).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from podium.engine.records import RunFinished
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .harness import WorkerProcess, effect_lines, submit_runs, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = "tests.distributed.app:effects"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the workers run uvloop; the test only watches


async def test_a_cancel_left_for_a_dead_worker_is_adopted_by_the_next(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects, starts = tmp_path / "effects.log", tmp_path / "starts.log"
    victim = WorkerProcess(tmp_path, "victim", shared_redis_url, prefix, AGENT, effects,
                           "--lease", "1", tool_delay=60, starts=starts)
    try:
        await victim.wait_ready()
        async with (
            RedisRunStore(shared_redis_url, prefix=prefix) as store,
            RedisQueue(shared_redis_url, prefix=prefix) as queue,
        ):
            await submit_runs(store, queue, "effects", ["run-1"])
            await wait_until(lambda: bool(effect_lines(starts)), 30, "the first call to start")
            victim.signal(signal.SIGKILL)
            assert await victim.wait_exit() == -signal.SIGKILL
            await store.request_cancel("run-1")  # what the gateway leaves for a running run

            heir = WorkerProcess(tmp_path, "heir", shared_redis_url, prefix, AGENT, effects,
                                 "--lease", "1", "--burst", starts=starts)
            try:
                assert await heir.wait_exit(60) == 0, heir.text()
            finally:
                heir.stop()
            record = await store.get("run-1")
            assert record is not None and record.status == "cancelled", record
            assert record.reason == "cancelled"
            entries = [e for _, e in await store.journal("run-1")]
            assert isinstance(entries[-1], RunFinished) and entries[-1].status == "cancelled"
            assert await queue.outstanding() == 0
        # The victim's one call started; nothing started after it died, nothing finished.
        assert [pid for _, pid in effect_lines(starts)] == [victim.pid]
        assert effect_lines(effects) == []
    finally:
        victim.stop()
