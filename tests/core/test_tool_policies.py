"""Tool policies: timeout, retries, circuit breaker, concurrency limit."""

from __future__ import annotations

import asyncio

import pytest
from _helpers import args, ctx, scripted, tool_messages

from podium import (
    Agent,
    BreakerPolicy,
    Engine,
    FunctionModel,
    RetryableToolError,
    tool,
    tool_call_reply,
)
from podium.tools import CircuitBreaker, ToolExecutor

pytestmark = pytest.mark.anyio


@pytest.fixture
def executor():  # type: ignore[no-untyped-def]
    ex = ToolExecutor(max_threads=4)
    yield ex
    ex.close()


async def test_timeout_becomes_an_error_observation() -> None:
    never = asyncio.Event()

    @tool(timeout=0.05)
    async def hang() -> str:
        """Never answers."""
        await never.wait()
        return "unreachable"

    seen: list[str] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("hang", "{}"))
        seen.append(tool_messages(messages)[-1].content)
        return "gave up"

    from podium import FunctionModel

    agent = Agent("t", FunctionModel(reply), tools=[hang])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
    assert record.status == "completed"
    assert record.output == "gave up"
    assert len(seen) == 1
    assert "timed out after 0.05s" in seen[0]


async def test_timeout_result_kind(executor: ToolExecutor) -> None:
    @tool(timeout=0.02)
    async def slow() -> str:
        """Slow."""
        await asyncio.Event().wait()
        return ""

    result = await executor.execute(slow, args(slow), ctx())
    assert not result.ok
    assert result.error == "timeout"


async def test_retry_then_success(executor: ToolExecutor) -> None:
    calls = 0

    @tool(retries=2, backoff_base=0.001)
    async def flaky() -> str:
        """Fails twice."""
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RetryableToolError("try again")
        return "third time lucky"

    result = await executor.execute(flaky, args(flaky), ctx())
    assert result.ok
    assert result.content == "third time lucky"
    assert result.attempts == 3
    assert calls == 3


async def test_retries_spent_and_non_retryable_errors(executor: ToolExecutor) -> None:
    calls = 0

    @tool(retries=1, backoff_base=0.001)
    def always_retryable() -> str:
        """Always asks for a retry."""
        nonlocal calls
        calls += 1
        raise RetryableToolError("busy")

    result = await executor.execute(always_retryable, args(always_retryable), ctx())
    assert (result.ok, result.error, result.attempts, calls) == (False, "exception", 2, 2)
    assert "after 2 attempts" in result.content

    @tool(retries=3, backoff_base=0.001)
    def broken() -> str:
        """A plain bug is not retried."""
        raise ValueError("bad")

    result = await executor.execute(broken, args(broken), ctx())
    assert (result.ok, result.attempts) == (False, 1)
    assert "ValueError: bad" in result.content


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_breaker_opens_rejects_without_calling_then_half_opens(
    executor: ToolExecutor,
) -> None:
    calls = 0
    failing = True

    @tool(breaker=BreakerPolicy(failure_threshold=3, reset_timeout_s=10.0))
    async def fragile() -> str:
        """Fails while ``failing``."""
        nonlocal calls
        calls += 1
        if failing:
            raise ConnectionError("down")
        return "up"

    clock = FakeClock()
    breaker = fragile.breaker = CircuitBreaker(fragile.policy.breaker, clock=clock)  # type: ignore[arg-type]

    for _ in range(3):
        result = await executor.execute(fragile, args(fragile), ctx())
        assert result.error == "exception"
    assert breaker.state == "open"
    assert calls == 3

    result = await executor.execute(fragile, args(fragile), ctx())
    assert (result.ok, result.error, result.attempts) == (False, "circuit_open", 0)
    assert calls == 3  # rejected without calling
    assert breaker.statistics().rejected == 1

    clock.now += 10.0
    assert breaker.state == "half_open"
    failing = False
    result = await executor.execute(fragile, args(fragile), ctx())
    assert result.ok and result.content == "up"
    assert calls == 4
    assert breaker.state == "closed"


def test_half_open_lets_one_probe_and_a_failed_probe_reopens() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, reset_timeout_s=5.0), clock=clock)
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    assert breaker.retry_in() == pytest.approx(5.0)
    clock.now += 5.0
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one
    breaker.record_failure()
    assert breaker.state == "open"
    assert breaker.statistics().opened == 2


async def test_max_concurrency_is_respected(executor: ToolExecutor) -> None:
    running = 0
    peak = 0

    @tool(max_concurrency=2)
    async def limited(i: int) -> int:
        """At most two at once."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return i

    results = await asyncio.gather(
        *(executor.execute(limited, args(limited, f'{{"i": {i}}}'), ctx(i)) for i in range(6))
    )
    assert [r.content for r in results] == [str(i) for i in range(6)]
    assert peak == 2


async def test_max_concurrency_holds_across_runs() -> None:
    running = 0
    peak = 0

    @tool(max_concurrency=1)
    async def exclusive() -> str:
        """One at a time, process-wide."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return "ok"

    agent = Agent(
        "t",
        scripted(tool_call_reply(("exclusive", "{}"), ("exclusive", "{}")), "done"),
        tools=[exclusive],
    )
    async with Engine() as engine:
        records = await asyncio.gather(*(engine.run(agent, "go") for _ in range(4)))
    assert all(r.status == "completed" for r in records)
    assert peak == 1


@tool(timeout=0.02)
async def stubborn() -> str:
    """Catch the cancellation its own timeout throws in, and answer anyway."""
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return "swallowed"
    return "slept"


@tool(timeout=0.02, max_concurrency=2)
async def stubborn_limited() -> str:
    """The same, on the path of a tool with a concurrency limit."""
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return "swallowed"
    return "slept"


@tool(timeout=0.02)
async def slow_one() -> str:
    """Just slow: its timeout fires."""
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0, "left cancelling by an earlier call"
    await asyncio.sleep(5)
    return "never"


@pytest.mark.parametrize("first", ["stubborn", "stubborn_limited"])
async def test_a_tool_that_swallows_its_timeout_leaves_the_run_able_to_time_out_again(
    first: str,
) -> None:
    """A tool caught the cancellation its timeout threw in and returned: the deadline's
    cancel was never counted back, so the run's task stayed "cancelling" and the next
    call's ordinary timeout surfaced as a CancelledError that ended the drive."""

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply((first, "{}"))
        if request.step == 1:
            return tool_call_reply(("slow_one", "{}"))
        return "done"

    agent = Agent("a", FunctionModel(reply), tools=[stubborn, stubborn_limited, slow_one])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        journal = await engine.store.journal(record.run_id)
    results = [r for _, e in journal for r in getattr(e, "results", ())]
    assert record.status == "completed"
    assert [(r.name, r.error) for r in results] == [(first, None), ("slow_one", "timeout")]
