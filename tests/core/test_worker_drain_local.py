"""Worker.drain on the in-process queue: a run that ends within ``finish_s`` ends as usual
(acked, not released); one still going pauses at its next step boundary."""

from __future__ import annotations

import asyncio

import pytest

from podium import Agent, FunctionModel, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.local import LocalQueue
from podium.worker.worker import Worker

pytestmark = pytest.mark.anyio


def _agent(entered: asyncio.Event, release: asyncio.Event) -> Agent:
    @tool
    async def work(query: str) -> str:
        """Work until released.

        Args:
            query: Ignored.
        """
        entered.set()
        await release.wait()
        return "done"

    return Agent("worker-agent", FunctionModel(
        lambda m, r: tool_call_reply(("work", {"query": "x"})) if r.step < 2 else "finished"),
        tools=[work])


@pytest.mark.parametrize("finish_s", [30.0, 0.0], ids=["finishes", "pauses"])
async def test_a_run_ending_within_finish_s_ends_and_the_others_pause(finish_s: float) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    agent = _agent(entered, release)
    queue = LocalQueue()
    async with Engine() as engine:
        await engine.store.create(RunRecord("r1", agent.name, "go"))
        await queue.submit(QueueItem("r1", agent.name))
        worker = Worker(queue, engine, {agent.name: agent}, claim_block_s=0.05)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(entered.wait(), 10)  # in its first tool call
        draining = asyncio.create_task(worker.drain(30.0, finish_s=finish_s))
        await asyncio.sleep(0)  # the drain has begun
        release.set()  # the run could end now: both of its calls return at once
        await asyncio.wait_for(draining, 10)
        await asyncio.wait_for(running, 10)
        stored = await engine.store.get("r1")
    stats = worker.statistics()
    assert stored is not None
    if finish_s:
        assert stored.status == "completed" and (stats.completed, stats.released) == (1, 0)
    else:  # paused after the step in progress, handed back to the queue
        assert stored.status == "running" and stored.steps == 0
        # (released again if the run loop had claimed it back before it saw the drain)
        assert stats.completed == 0 and stats.released >= 1
