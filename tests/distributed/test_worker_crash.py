"""Real worker subprocesses: SIGKILL mid-run, crash loops into the dead-letter stream."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .app import TOOL_STEPS
from .harness import (
    WorkerProcess,
    burst_until_clean,
    check_completed_once,
    effect_lines,
    submit_runs,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the workers run uvloop; the test only watches


async def test_sigkilled_worker_runs_are_resumed_exactly_once(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    ids = [f"run-{i:03d}" for i in range(200)]
    args = ("--concurrency", "16", "--lease", "1.5", "--burst")

    def worker(name: str, tool_delay: float) -> WorkerProcess:
        return WorkerProcess(tmp_path, name, shared_redis_url, prefix,
                             "tests.distributed.app:effects", effects, *args,
                             tool_delay=tool_delay)

    # The victim works first, alone and slowly (200 runs would take it 50 s): whatever the
    # machine's load, it is mid-run when it is killed. Started together, three workers
    # could drain the queue in about a second, and a victim slow to claim missed it.
    workers = [worker("w0", 1.0)]
    try:
        victim = workers[0]
        await victim.wait_ready()
        async with (
            RedisRunStore(shared_redis_url, prefix=prefix) as store,
            RedisQueue(shared_redis_url, prefix=prefix) as queue,
        ):
            await submit_runs(store, queue, "effects", ids)

            def victim_mid_runs() -> bool:
                done = Counter(k.split(":")[0] for k, pid in effect_lines(effects)
                               if pid == victim.pid)
                return sum(done.values()) >= 20 and any(0 < n < TOOL_STEPS for n in done.values())

            await wait_until(victim_mid_runs, 30, "the victim to be mid-run")
            workers += [worker(f"w{i}", 0.05) for i in (1, 2)]  # they claim beside it
            # The victim's runs move in lockstep (claimed together, 1 s a tool call): after
            # each batch's last call, for about a second, none is part-way until the next
            # batch's first call. So the kill waits for a part-way run again, as soon as the
            # first survivor is ready: the queue still holds most runs then, and whichever
            # batch the victim holds is part-way within a second or two.
            await workers[1].wait_ready()
            await wait_until(victim_mid_runs, 30, "the victim to be mid-run beside a survivor")
            victim.signal(signal.SIGKILL)
            assert await victim.wait_exit() == -signal.SIGKILL
            for w in workers[1:]:
                assert await w.wait_exit(60) == 0, w.text()
            await check_completed_once(store, ids)
            assert await queue.outstanding() == 0

        lines = effect_lines(effects)
        by_key: dict[str, list[int]] = defaultdict(list)
        for key, pid in lines:
            by_key[key].append(pid)
        expected = {f"{r}:{s}:0" for r in ids for s in range(TOOL_STEPS)}
        assert set(by_key) == expected  # every call ran
        # A call may run twice only if it was in flight when its worker died: once by the
        # victim, then once by the worker that resumed the run — never a checkpointed call.
        repeated = {k: pids for k, pids in by_key.items() if len(pids) > 1}
        for key, pids in repeated.items():
            assert len(pids) == 2 and pids[0] == victim.pid != pids[1], (key, pids)
        per_run: dict[str, int] = defaultdict(int)
        for key in repeated:
            per_run[key.split(":")[0]] += 1
        assert all(n == 1 for n in per_run.values()), per_run
        assert len(repeated) <= 16  # at most the victim's concurrency
        # Reclaimed runs resumed from their checkpoints: the victim's finished steps were
        # not redone by the survivor.
        resumed = 0
        for run_id in ids:
            steps = [(int(k.split(":")[1]), pid) for k, pid in lines if k.startswith(run_id + ":")]
            mine = [s for s, pid in steps if pid == victim.pid]
            theirs = [s for s, pid in steps if pid != victim.pid]
            if mine and theirs:
                assert min(theirs) >= max(mine), (run_id, steps)
                resumed += min(theirs) > 0
        assert resumed > 0
    finally:
        for w in workers:
            w.stop()


async def test_run_that_kills_its_worker_is_dead_lettered(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, "crasher", ["doomed"])
        codes = await burst_until_clean(
            tmp_path, shared_redis_url, prefix, "tests.distributed.app:crasher", effects
        )
        assert codes == [-signal.SIGKILL, -signal.SIGKILL, 0]
        assert [k for k, _ in effect_lines(effects)] == ["doomed:0:0"] * 2  # two deliveries ran
        (dead,) = await queue.dead_letters()
        assert dead.item.run_id == "doomed" and dead.deliveries == 3
        assert dead.reason == "delivered 3 times without finishing"
        record = await store.get("doomed")
        assert record is not None
        assert (record.status, record.reason) == ("failed", "dead_letter")
        assert record.error == dead.reason
        assert await queue.outstanding() == 0
