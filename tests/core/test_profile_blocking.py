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
from podium.observe.threadclock import CREDIT_NS

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
    # The preemption a busy host adds is not blocked time (what the scheduler says the
    # thread waited for a CPU around the sleep is taken off it), but most of the sleep is.
    assert step.blocked_ns[TOOLS] >= 0.5 * slept, f"{case}: {step}"
    # Measured, the phase's CPU is no more than the thread's (the short slices of the other
    # phases are estimates, which a busy host's preemption can move either way).
    assert step.cpu_ns[TOOLS] <= used, f"{case}: {step}, {used / MS:.2f} ms of thread CPU"
    # The summaries name it too: blocked, not waiting and not CPU.
    aggregate = ProfileAggregator()
    aggregate.add_run(record.profile)
    tools = aggregate.summary().phases["tools"]
    assert tools.blocked_ms_total >= 0.5 * SLEEP_S * 1e3
    assert tools.cpu_ms_total <= used / MS
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
    assert step.wall_ns[TOOLS] >= 40 * MS  # (a loop may fire a 50 ms timer a little early)
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

    assert total("podium_step_phase_blocked_seconds_total") >= 0.5 * SLEEP_S
    assert total("podium_step_phase_cpu_seconds_total") <= used / 1e9


@pytest.mark.parametrize("wait_s", [0.0, 0.001])
async def test_many_runs_phase_cpu_adds_up_to_no_more_than_the_threads(wait_s: float) -> None:
    """A thousand runs, their steps instant (one slice each: never a sampled slice) or
    waiting for their model and tool: the phases' CPU, summed over every step, is the
    thread's CPU, never more (but for the credit its clock saw before they started), on a
    busy host too, where each step's running time is partly preemption: an estimate above
    what the thread's clock saw is cut. (The loop's own work is CPU no phase counts: the
    sum is usually well below the thread's; the credit's cap covers the bound's lag
    behind a host whose load changes while the runs go.)"""
    from podium.cli.overhead import podium_agent

    agent = podium_agent(wait_s, wait_s)
    async with Engine() as engine:
        before = time.thread_time_ns()
        records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(1000)))
        used = time.thread_time_ns() - before
    assert all(r.status == "completed" and r.profile is not None for r in records)
    booked = sum(r.profile.cpu_ns for r in records if r.profile is not None)
    # Never more than the thread's: the phases are given no CPU the thread's clock did not
    # see, but for the little it saw before the runs started (the credit's cap).
    assert booked <= used + CREDIT_NS, f"phases {booked / MS:.1f} ms, thread {used / MS:.1f} ms"
    assert booked >= 0.2 * used  # (and the phases are most of what the thread does)


def test_the_phases_are_given_no_cpu_the_threads_clock_did_not_see() -> None:
    """ThreadClock.take: a step's CPU figures draw on what the clock's readings saw (plus
    the wall time since the last reading); more is cut, and what the loop's own work left
    unclaimed piles up to at most CREDIT_NS."""
    from podium.observe.threadclock import ThreadClock

    clock, cpu = ThreadClock(), [0]
    clock.schedstat = False
    clock.anchor(0, lambda: cpu[0], None, 0.0)  # the first reading: nothing seen yet
    cpu[0] = 3 * MS
    clock.anchor(5 * MS, lambda: cpu[0], None, 0.0)  # 3 ms of the thread's CPU seen
    assert clock.take(2 * MS, 5 * MS) == 2 * MS
    assert clock.take(2 * MS, 5 * MS) == 1 * MS  # only 1 ms left, no wall time since
    assert clock.take(MS // 2, 5 * MS + MS // 2) == MS // 2  # the wall time since: at most
    assert clock.take(MS, 5 * MS + MS // 2) == 0
    cpu[0] = 100 * MS  # 97 ms more, none of it given to a phase: capped
    clock.anchor(200 * MS, lambda: cpu[0], None, 0.0)
    assert clock.credit == CREDIT_NS
