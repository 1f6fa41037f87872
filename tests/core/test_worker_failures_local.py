"""A run that fails in the worker (a bug: an exception out of the engine, not a failed
run) on the in-process queue, whose claims have no lease. On Redis the lease expires and
the run is delivered again, counted; here nothing would ever give it back: it stayed in
flight, never driven again, until the process restarted. It is now tried again after a
backoff, and dead-lettered with the error after ``max_deliveries`` failures.

The fault is injected into a real in-memory store: its step writes raise."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from podium import Agent, FunctionModel, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.records import JournalEntry, RunRecord, StepRecord
from podium.queue.base import QueueItem
from podium.queue.local import LocalQueue
from podium.store.memory import MemoryRunStore
from podium.worker.worker import Worker

pytestmark = pytest.mark.anyio


class BrokenSteps(MemoryRunStore):
    """Its first ``failures`` step checkpoints raise (a bug in a store, say)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def append_nowait(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> bool:
        return False  # every write through append(), where the fault is

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        if self.failures and any(isinstance(e, StepRecord) for e in entries):
            self.failures -= 1
            raise RuntimeError("the store's own bug")
        await super().append(run_id, entries, record=record)


@tool
def lookup(query: str) -> str:
    """Look it up.

    Args:
        query: What.
    """
    return "42"


AGENT = Agent(
    "looker",
    FunctionModel(lambda m, r: tool_call_reply(("lookup", {"query": "x"})) if r.step < 1 else "42"),
    tools=[lookup],
)


async def _drive(store: MemoryRunStore) -> tuple[RunRecord, Worker, LocalQueue]:
    queue = LocalQueue()
    async with Engine(store) as engine:
        await store.create(RunRecord("r1", AGENT.name, "go"))
        await queue.submit(QueueItem("r1", AGENT.name))
        worker = Worker(
            queue, engine, {AGENT.name: AGENT}, claim_block_s=0.05, failure_backoff_s=0.01
        )
        running = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(10):
                while (record := await store.get("r1")) is None or not record.done:
                    await store.wait_journal("r1", len(await store.journal("r1")) - 1, 1.0)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    return record, worker, queue


async def test_a_run_that_failed_in_the_worker_is_tried_again() -> None:
    record, worker, _ = await _drive(BrokenSteps(failures=2))
    assert record.status == "completed" and record.output == "42"
    assert worker.statistics().completed == 1


async def test_a_run_that_keeps_failing_in_the_worker_is_dead_lettered_with_the_error() -> None:
    record, _, queue = await _drive(BrokenSteps(failures=100))
    assert record.status == "failed" and record.reason == "dead_letter"
    assert record.error is not None and "failed in the worker 3 times" in record.error
    assert "the store's own bug" in record.error
    (dead,) = await queue.dead_letters()
    assert dead.item.run_id == "r1"
