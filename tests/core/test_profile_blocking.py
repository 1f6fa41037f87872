"""A coroutine that blocks the loop is booked as blocked, not CPU, and a run's phase CPU
never exceeds what its thread's CPU clock says.

An async tool that calls ``time.sleep(0.2)`` holds the loop 200 ms and uses no CPU.
Before, the profile showed those 200 ms as the tools phase's CPU (a 96 % CPU share for a
sleeping tool); now they are the phase's *blocked* time, whether the sleep ran in the
call's first slice (inside the step's running time), in a slice after it first waited
(timed by the executor while the step waits), or in one of several calls gathered.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from podium import Agent, Engine, FunctionModel, tool, tool_call_reply
from podium.engine.profile import STEP_PHASES, ProfileAggregator
from podium.engine.stopwatch import CpuClock

pytestmark = pytest.mark.anyio

MS = 1_000_000
SLEEP_S = 0.2
TOOLS = STEP_PHASES.index("tools")


@tool
async def nap(s: float) -> str:
    """Block the loop (a synchronous sleep inside a coroutine: the bug being profiled).

    Args:
        s: Seconds.
    """
    time.sleep(s)  # noqa: ASYNC251 (the blocking call is the point)
    return "rested"


@tool
async def nap_after_a_wait(s: float) -> str:
    """Wait, then block the loop.

    Args:
        s: Seconds.
    """
    await asyncio.sleep(0.001)
    time.sleep(s)  # noqa: ASYNC251
    return "rested"


CASES = {
    "one call, its first slice": [("nap", {"s": SLEEP_S})],
    "a slice after the call first waited": [("nap_after_a_wait", {"s": SLEEP_S})],
    "two calls in one step": [("nap", {"s": SLEEP_S / 2}), ("nap", {"s": SLEEP_S / 2})],
}


@pytest.mark.parametrize("clock", ["sampled", "thread"])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_tool_that_sleeps_on_the_loop_is_blocked_not_cpu(
    case: str, clock: CpuClock
) -> None:
    calls = CASES[case]

    def reply(messages, request):  # type: ignore[no-untyped-def]
        return tool_call_reply(*calls) if request.step == 0 else "done"

    agent = Agent("sleeper", FunctionModel(reply), tools=[nap, nap_after_a_wait])
    async with Engine(clock=clock) as engine:
        before = time.thread_time_ns()
        record = await engine.run(agent, "go")
        used = time.thread_time_ns() - before
    assert record.status == "completed" and record.profile is not None
    step = record.profile.steps[0]
    slept = int(SLEEP_S * 1e9)
    assert step.wall_ns[TOOLS] >= slept
    assert step.blocked_ns, f"{case}: nothing blocked in {step}"
    # The preemption a busy host adds is not blocked time, but the sleep is nearly all of it.
    assert step.blocked_ns[TOOLS] >= 0.8 * slept, f"{case}: {step}"
    assert step.cpu_ns[TOOLS] <= 0.2 * slept, f"{case}: {step}"
    # The run's phase CPU is what its thread's clock allows (a millisecond's grace for
    # the estimate of short slices, whose ratio a busy host moves).
    assert record.profile.cpu_ns <= used + MS, (record.profile.cpu_ns, used)
    # The summaries name it too: blocked, not waiting and not CPU.
    aggregate = ProfileAggregator()
    aggregate.add_run(record.profile)
    tools = aggregate.summary().phases["tools"]
    assert tools.blocked_ms_total >= 0.8 * SLEEP_S * 1e3
    assert tools.wait_ms_total < 0.2 * SLEEP_S * 1e3
    assert "blocked)" in str(step)


async def test_a_tool_that_waits_is_not_blocked() -> None:
    """The other side: a real wait (``asyncio.sleep``) is waiting, never blocked."""

    @tool
    async def patient(s: float) -> str:
        """Wait without blocking.

        Args:
            s: Seconds.
        """
        await asyncio.sleep(s)
        return "done"

    def reply(messages, request):  # type: ignore[no-untyped-def]
        return tool_call_reply(("patient", {"s": 0.05})) if request.step == 0 else "done"

    agent = Agent("waiter", FunctionModel(reply), tools=[patient])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
    assert record.status == "completed" and record.profile is not None
    step = record.profile.steps[0]
    assert step.wall_ns[TOOLS] >= 50 * MS
    # The wait is none of it. (Another thread holding the GIL can hold any slice a while,
    # and that is blocked time, truly: but not half of a wait whose slices run for µs.)
    blocked = step.blocked_ns[TOOLS] if step.blocked_ns else 0
    assert blocked < 25 * MS, step


async def test_the_metrics_count_blocked_time_apart_from_cpu() -> None:
    """``podium_step_phase_blocked_seconds_total`` rises by the sleep;
    ``podium_step_phase_cpu_seconds_total`` by no more than the thread's CPU."""
    from prometheus_client import CollectorRegistry

    from podium.observe.metrics import RunMetrics

    def reply(messages, request):  # type: ignore[no-untyped-def]
        return tool_call_reply(("nap", {"s": SLEEP_S})) if request.step == 0 else "done"

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    agent = Agent("sleeper", FunctionModel(reply), tools=[nap])
    async with Engine() as engine:
        engine.hook = metrics
        before = time.thread_time_ns()
        record = await engine.run(agent, "go")
        used = time.thread_time_ns() - before
    assert record.status == "completed"
    await metrics.flush()

    def total(name: str) -> float:
        value = registry.get_sample_value(name, {"agent": "sleeper", "phase": "tools"})
        return value or 0.0

    assert total("podium_step_phase_blocked_seconds_total") >= 0.8 * SLEEP_S
    cpu = sum(registry.get_sample_value("podium_step_phase_cpu_seconds_total",
                                        {"agent": "sleeper", "phase": phase}) or 0.0
              for phase in STEP_PHASES)
    assert cpu <= used / 1e9 + 0.001, (cpu, used)
