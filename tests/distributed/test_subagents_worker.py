"""Sub-agents on Redis with ``podium worker`` processes: a worker SIGKILLed while a child
run is under way; the run's parent and children are resumed by another worker, no
finished child or checkpointed call repeated; cancelling a parent cancels its children."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from podium.engine.children import child_run_id, child_runs
from podium.engine.records import RunFinished
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .app import TOOL_STEPS
from .harness import WorkerProcess, burst_until_clean, effect_lines, submit_runs, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = "tests.distributed.app:team"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the workers run their own loops; the test only watches


async def test_sigkill_while_a_child_runs_resumes_parent_and_children_once(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    ids = ["team-0", "team-1"]
    args = ("--lease", "1.5", "--burst")
    victim = WorkerProcess(tmp_path, "victim", shared_redis_url, prefix, AGENT, effects, *args,
                           tool_delay=0.1)
    survivor: WorkerProcess | None = None
    try:
        await victim.wait_ready()
        async with (
            RedisRunStore(shared_redis_url, prefix=prefix) as store,
            RedisQueue(shared_redis_url, prefix=prefix) as queue,
        ):
            await submit_runs(store, queue, "team", ids)

            async def mid_children() -> bool:  # one child ended, the other half-way
                keys = [k for k, _ in effect_lines(effects)]
                for run_id in ids:
                    quick = await store.get(child_run_id(run_id, 0, 0))
                    slow = sum(k.startswith(child_run_id(run_id, 0, 1) + ":") for k in keys)
                    if quick is None or not quick.done or not 0 < slow < TOOL_STEPS:
                        return False
                return True

            await wait_until(mid_children, 30, "children under way")
            victim.signal(signal.SIGKILL)
            assert await victim.wait_exit() == -signal.SIGKILL
            survivor = WorkerProcess(tmp_path, "survivor", shared_redis_url, prefix, AGENT,
                                     effects, *args, tool_delay=0.01)
            assert await survivor.wait_exit(60) == 0, survivor.text()
            for run_id in ids:
                record = await store.get(run_id)
                assert record is not None and (record.status, record.output) == (
                    "completed", "team done"), record
                children = await child_runs(store, record)
                assert [(c.agent, c.status, c.parent_call) for c in children] == [
                    ("one_step", "completed", "0:0"), ("effects", "completed", "0:1")]
            assert await queue.outstanding() == 0
        lines = effect_lines(effects)
        by_key = Counter(k for k, _ in lines)
        for run_id in ids:
            quick, slow = child_run_id(run_id, 0, 0), child_run_id(run_id, 0, 1)
            assert by_key[f"{quick}:0:0"] == 1  # the finished child was not run again
            assert by_key[f"{run_id}:1:0"] == 1
            slow_keys = {f"{slow}:{s}:0" for s in range(TOOL_STEPS)}
            assert slow_keys <= set(by_key)
            # Only the call in flight at the kill may have run twice (victim, then survivor).
            twice = [k for k in slow_keys if by_key[k] > 1]
            assert len(twice) <= 1 and all(by_key[k] == 2 for k in twice)
            mine = [int(k.split(":")[1]) for k, pid in lines
                    if k.startswith(slow + ":") and pid == victim.pid]
            theirs = [int(k.split(":")[1]) for k, pid in lines
                      if k.startswith(slow + ":") and pid != victim.pid]
            assert mine and theirs and min(theirs) >= max(mine)  # resumed, not restarted
    finally:
        victim.stop()
        if survivor is not None:
            survivor.stop()


async def test_cancelling_a_parent_on_a_worker_cancels_its_children(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    worker = WorkerProcess(tmp_path, "w", shared_redis_url, prefix, AGENT, effects,
                           "--burst", tool_delay=0.5)
    try:
        await worker.wait_ready()
        async with (
            RedisRunStore(shared_redis_url, prefix=prefix) as store,
            RedisQueue(shared_redis_url, prefix=prefix) as queue,
        ):
            await submit_runs(store, queue, "team", ["doomed"])

            async def child_running() -> bool:
                child = await store.get(child_run_id("doomed", 0, 1))
                return child is not None and child.status == "running"

            await wait_until(child_running, 30, "the child to run")
            await store.request_cancel("doomed")
            assert await worker.wait_exit(30) == 0, worker.text()
            record = await store.get("doomed")
            assert record is not None and record.status == "cancelled"
            children = await child_runs(store, record)
            quick, slow = children  # the one-step child may have ended before the cancel
            assert slow.status == "cancelled" and quick.status in ("completed", "cancelled")
    finally:
        worker.stop()


async def test_a_dead_lettered_parent_ends_its_children(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The parent's child kills its worker on every delivery; the queue dead-letters the
    parent. Its child, which only ever ran on the parent's lease, ends with it (``failed``,
    ``dead_letter``) instead of staying ``running`` with nothing left to drive it."""
    effects = tmp_path / "effects.log"
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, "crash_team", ["doomed"])
        codes = await burst_until_clean(
            tmp_path, shared_redis_url, prefix, "tests.distributed.app:crash_team", effects
        )
        assert codes == [-signal.SIGKILL, -signal.SIGKILL, 0]
        child_id = child_run_id("doomed", 0, 0)
        assert [k for k, _ in effect_lines(effects)] == [f"{child_id}:0:0"] * 2
        record = await store.get("doomed")
        assert record is not None and (record.status, record.reason) == ("failed", "dead_letter")
        (child,) = await child_runs(store, record)
        assert (child.run_id, child.status, child.reason) == (child_id, "failed", "dead_letter")
        assert child.error is not None and "doomed" in child.error
        assert await queue.outstanding() == 0
        for run_id in ("doomed", child_id):  # both ends journaled, as every run's end is
            (_, last), *_ = reversed(await store.journal(run_id))
            assert isinstance(last, RunFinished) and last.reason == "dead_letter", run_id
