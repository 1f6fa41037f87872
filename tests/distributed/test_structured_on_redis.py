"""Structured output on Redis (store + queue): an in-process Worker retries an invalid
answer, and a ``podium worker`` SIGKILLed after a rejected answer was journaled is resumed by
another without the model being asked again for the steps already journaled."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from podium.engine.driver import Engine
from podium.engine.records import OutputRejected, RunFinished
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .harness import burst_until_clean, submit_runs
from .structured_app import Verdict, verdict

pytestmark = pytest.mark.anyio


def _log_lines(path: Path, kind: str) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split()[1:] for line in path.read_text().splitlines() if line.startswith(kind)]


async def test_a_worker_on_redis_retries_then_stores_the_typed_output(
    shared_redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("PODIUM_TEST_EFFECTS", str(effects))
    (tmp_path / "effects.log.crashed").write_text("1")  # this worker is ours: no SIGKILL
    ids = [f"s{i}" for i in range(4)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, "verdict", ids)
        worker = Worker(queue, Engine(store), {"verdict": verdict}, concurrency=4,
                        claim_block_s=0.05)
        await worker.run(burst=True)
        for run_id in ids:
            record = await store.get(run_id)
            assert record is not None and record.status == "completed", record
            assert record.structured and record.output_as(Verdict) == Verdict("A-1", True)
            entries = [e for _, e in await store.journal(run_id)]
            assert sum(isinstance(e, OutputRejected) for e in entries) == 1
            assert isinstance(entries[-1], RunFinished) and entries[-1].structured


@pytest.mark.slow
async def test_a_sigkilled_worker_resumes_without_asking_again(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await submit_runs(store, queue, "verdict", ["v1"])
        codes = await burst_until_clean(
            tmp_path, shared_redis_url, prefix, "tests.distributed.structured_app:verdict",
            effects, attempts=3, max_deliveries=None,
        )
        assert codes == [-signal.SIGKILL, 0]
        record = await store.get("v1")
        assert record is not None and record.status == "completed", record
        assert record.output_as(Verdict) == Verdict("A-1", True)
    asked = Counter(int(step) for _, step, _ in _log_lines(effects, "model"))
    assert asked == {0: 1, 1: 1, 2: 1}  # the rejected answer and the tool step: never re-asked
    pids = {pid for _, _, pid in _log_lines(effects, "model")}
    assert len(pids) == 2  # steps 0-1 on the killed worker, step 2 on the one that resumed
    assert [key for key, _ in _log_lines(effects, "tool")] == ["v1:1:0", "v1:1:0"]
