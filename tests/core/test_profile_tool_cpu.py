"""A tool's CPU on the loop thread counts as the tools phase's CPU on every path, and a
screener's wait counts as waiting.

The fast lane runs a lone call's first slice inside the step's running time; every other
path awaits the call as a wait (several calls gathered, a tool with a concurrency limit,
a value rendered to text after the call, the call's slices after it first waited): the
executor reports those slices' running time as the call's CPU. Before, they counted as
waiting (0.01 ms of CPU for 10 ms burned), and a screener that waited 20 ms counted as
20 ms of CPU (another run's CPU too, with the exact clock).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from podium import (
    Agent,
    ContextPolicy,
    Engine,
    EstimateTokenizer,
    FunctionModel,
    tool,
    tool_call_reply,
)
from podium.engine.stopwatch import CpuClock
from podium.security.screen import ScreeningPolicy
from podium.tools.executor import ToolResult, render_result

pytestmark = pytest.mark.anyio

MS = 1_000_000
BURN_MS = 10


def burn(ms: float) -> None:
    """Spend ``ms`` milliseconds of the loop thread's CPU (not of wall time: a machine
    busy with other work preempts the thread, and its wall time is then more)."""
    end = time.thread_time_ns() + int(ms * MS)
    while time.thread_time_ns() < end:
        pass


@tool
async def hot(ms: float) -> str:
    """Burn the loop thread.

    Args:
        ms: How long.
    """
    burn(ms)
    return "ok"


@tool(max_concurrency=4)
async def hot_limited(ms: float) -> str:
    """Burn the loop thread, with a concurrency limit.

    Args:
        ms: How long.
    """
    burn(ms)
    return "ok"


@tool
async def hot_after_a_wait(ms: float) -> str:
    """Wait, then burn the loop thread.

    Args:
        ms: How long.
    """
    await asyncio.sleep(0.005)
    burn(ms)
    return "ok"


TABLE = {f"row{i}": list(range(40)) for i in range(20_000)}


@tool
async def big_table(rows: int) -> dict[str, list[int]]:
    """A value that takes a while to render to text (made beforehand: the call itself is
    instant, its rendering is the work).

    Args:
        rows: How many (all of them).
    """
    return TABLE


CASES = {
    "one call, the fast lane": [("hot", {"ms": BURN_MS})],
    "two calls in one step": [("hot", {"ms": BURN_MS / 2}), ("hot", {"ms": BURN_MS / 2})],
    "a tool with a concurrency limit": [("hot_limited", {"ms": BURN_MS})],
    "slices after the call first waited": [("hot_after_a_wait", {"ms": BURN_MS})],
}


async def tools_phase(calls: list[tuple[str, object]], clock: CpuClock) -> tuple[int, int]:
    def reply(messages, request):  # type: ignore[no-untyped-def]
        return tool_call_reply(*calls) if request.step == 0 else "done"

    agent = Agent(
        "a", FunctionModel(reply), tools=[hot, hot_limited, hot_after_a_wait, big_table]
    )
    async with Engine(clock=clock) as engine:
        record = await engine.run(agent, "go")
    assert record.status == "completed" and record.profile is not None
    step = record.profile.steps[0]
    return step.wall_ns[3], step.cpu_ns[3]


@pytest.mark.parametrize("clock", ["sampled", "thread"])
@pytest.mark.parametrize("case", list(CASES))
async def test_cpu_a_tool_burns_on_the_loop_is_the_tools_phase_cpu(
    case: str, clock: CpuClock
) -> None:
    wall, cpu = await tools_phase(CASES[case], clock)
    assert cpu >= 0.6 * BURN_MS * MS, f"{case}: {cpu / MS:.2f} ms of CPU for {BURN_MS} burned"
    assert cpu <= wall * 1.05 + MS // 10


@pytest.mark.parametrize("clock", ["sampled", "thread"])
async def test_rendering_a_tools_value_to_text_is_cpu(clock: CpuClock) -> None:
    """A tool that returns a large dict: building and rendering it is all CPU (it waits
    for nothing); the rendering runs after the call, which the step awaits as a wait."""
    # The rendering's own CPU, measured here on this thread's clock: CPU against CPU, so
    # a busy machine (which stretches the wall time, not the CPU) changes neither side.
    start = time.thread_time_ns()
    render_result(TABLE)
    rendering = time.thread_time_ns() - start
    wall, cpu = await tools_phase([("big_table", {"rows": 20_000})], clock)
    assert wall >= 2 * MS  # (20,000 rows of 40 numbers take some rendering)
    # Booked as waiting, the phase's CPU was ~0.01 ms. The sampled clock estimates CPU from
    # running time and a CPU/running ratio taken on other slices; on a host with more
    # runnable threads than cores that ratio can be half the rendering's own, so its bound
    # is looser (a failure seen at load 4+ on 2 cores); the thread clock reads the CPU.
    floor = 0.5 if clock == "thread" else 0.2
    assert cpu >= floor * rendering, f"{cpu / MS:.2f} ms of CPU for {rendering / MS:.2f} ms"


class SlowScreen(ScreeningPolicy):
    """A screen behind a remote classifier: each verdict takes 20 ms of waiting."""

    async def screen_result(self, result: ToolResult) -> ToolResult:
        await asyncio.sleep(0.02)
        return result


@pytest.mark.parametrize("clock", ["sampled", "thread"])
async def test_a_screener_that_waits_is_waiting_not_cpu(clock: CpuClock) -> None:
    def reply(messages, request):  # type: ignore[no-untyped-def]
        return tool_call_reply(("hot", {"ms": 0})) if request.step == 0 else "done"

    agent = Agent("a", FunctionModel(reply), tools=[hot], screening=SlowScreen())
    async with Engine(clock=clock) as engine:
        record = await engine.run(agent, "go")
    assert record.status == "completed" and record.profile is not None
    wall, cpu = record.profile.steps[0].wall_ns[3], record.profile.steps[0].cpu_ns[3]
    assert wall >= 15 * MS
    # The wait is none of the CPU: what the phase ran besides it may be anything on a busy
    # machine (the sampled clock counts a preempted thread's running time), the wait never.
    waited = 15 * MS
    assert cpu <= 1.05 * (wall - waited) + MS // 10, f"{cpu / MS:.2f} ms of CPU in {wall / MS:.2f}"



class SlowTokenizer(EstimateTokenizer):
    """Counting a long text takes a while (a real BPE tokenizer on a large result does)."""

    name = "slow"

    def count(self, text: str) -> int:
        if len(text) > 10_000:
            burn(BURN_MS)
        return super().count(text)


@dataclass
class BusyClassifier:
    """A local classifier: its verdict is CPU on the loop, not a wait."""

    name: str = "slow"

    async def screen(self, text: str) -> tuple[()]:
        burn(BURN_MS)
        return ()


@tool
async def long_page(i: int) -> str:
    """A long page.

    Args:
        i: Which.
    """
    return "x" * 200_000


@tool
async def short_note(i: int) -> str:
    """A short note.

    Args:
        i: Which.
    """
    return "ok"


@pytest.mark.parametrize("clock", ["sampled", "thread"])
@pytest.mark.parametrize("work", ["cutting the result", "screening it"])
async def test_a_step_of_several_calls_counts_cutting_and_screening_results_as_cpu(
    work: str, clock: CpuClock
) -> None:
    """Each of several calls is cut to its budget and screened in a task of its own while
    the step waits for all of them: that CPU counted as waiting (0.04 ms of 10)."""
    options: dict[str, object] = (
        {"context": ContextPolicy(tokenizer=SlowTokenizer(), max_context_tokens=10**7)}
        if work == "cutting the result"
        else {"screening": ScreeningPolicy(screeners=(BusyClassifier(),), inputs=False)}
    )

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("long_page", {"i": 1}), ("short_note", {"i": 2}))
        return "done"

    tools = [long_page, short_note]
    agent = Agent("a", FunctionModel(reply), tools=tools, **options)  # type: ignore[arg-type]
    async with Engine(clock=clock) as engine:
        record = await engine.run(agent, "go")
    assert record.status == "completed" and record.profile is not None
    cpu = record.profile.steps[0].cpu_ns[3]
    assert cpu >= 0.6 * BURN_MS * MS, f"{work}: {cpu / MS:.2f} ms of CPU"
