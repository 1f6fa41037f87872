"""Sync tools run in the thread pool, cpu_bound tools in the process pool: the loop never blocks."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ProcessPoolExecutor

import pytest
from _cpu_tools import fib, whoami
from _helpers import args, ctx, journal_results

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.tools import ToolExecutor

pytestmark = pytest.mark.anyio

SLEEP_S = 0.3


@tool
def blocking_io(seconds: float) -> str:
    """A synchronous tool that blocks its thread.

    Args:
        seconds: How long to block.
    """
    time.sleep(seconds)
    return "slept"


@tool
async def instant() -> str:
    """Answers at once."""
    return "now"


async def test_sync_sleeping_tool_does_not_stall_the_loop_or_other_runs() -> None:
    sleeper = Agent(
        "sleeper",
        SimulatedModel(Scenario.react("blocking_io", {"seconds": SLEEP_S}, tool_steps=1)),
        tools=[blocking_io],
    )
    quick = Agent(
        "quick",
        SimulatedModel(Scenario.react("instant", tool_steps=3)),
        tools=[instant],
    )
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        interval = 0.005
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(interval)
            lags.append(time.perf_counter() - t0 - interval)

    async with Engine() as engine:
        tick = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        slow_task = asyncio.create_task(engine.run(sleeper, "sleep"))
        await asyncio.sleep(0)  # let the sleeper reach its tool
        quick_records = [await engine.run(quick, "quick") for _ in range(5)]
        quick_done = time.perf_counter() - t0
        slow = await slow_task
        stop.set()
        await tick
    assert slow.status == "completed"
    assert all(r.status == "completed" for r in quick_records)
    assert quick_done < SLEEP_S / 2, "other runs waited for the sleeping tool"
    assert len(lags) > 10
    assert max(lags) < SLEEP_S / 3, f"event loop stalled {max(lags):.3f}s"
    assert slow.profile is not None
    tools_wall_s = slow.profile.steps[0].wall_ns[3] / 1e9
    assert tools_wall_s >= SLEEP_S * 0.9


async def test_cpu_bound_tool_runs_in_another_process() -> None:
    pool = ProcessPoolExecutor(max_workers=1)
    executor = ToolExecutor(process_pool=pool)
    try:
        result = await executor.execute(whoami, args(whoami), ctx())
        assert result.ok, result.content
        assert int(result.content) != os.getpid()
        result = await executor.execute(fib, args(fib, '{"n": 30}'), ctx())
        assert result.content == "832040"
        assert result.cpu_ns >= 0
    finally:
        executor.close()
        pool.shutdown(wait=True)


async def test_cpu_bound_tool_through_an_engine() -> None:
    pool = ProcessPoolExecutor(max_workers=1)
    executor = ToolExecutor(process_pool=pool)
    agent = Agent("cpu", SimulatedModel(Scenario.react("whoami", tool_steps=1)), tools=[whoami])
    try:
        async with Engine(executor=executor) as engine:
            record = await engine.run(agent, "who?")
            journal = await engine.store.journal(record.run_id)
    finally:
        executor.close()
        pool.shutdown(wait=True)
    assert record.status == "completed"
    pids = [int(r.content) for r in journal_results(journal)]
    assert len(pids) == 1 and pids[0] != os.getpid()
