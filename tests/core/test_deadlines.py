"""Deadlines on waiting tool calls: exact timers for short timeouts, a wheel for long ones."""

from __future__ import annotations

import asyncio

import pytest

from podium.tools import deadlines
from podium.tools.deadlines import DeadlineWheel, with_deadline

pytestmark = pytest.mark.anyio


async def test_short_timeout_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        await with_deadline(asyncio.sleep(10), 0.02)


@pytest.mark.parametrize("use_wheel", [False, True])
async def test_deadline_fires_or_is_disarmed(
    monkeypatch: pytest.MonkeyPatch, use_wheel: bool
) -> None:
    if use_wheel:
        monkeypatch.setattr(deadlines, "WHEEL_MIN_TIMEOUT_S", 0.0)
    with pytest.raises(TimeoutError):
        await with_deadline(asyncio.sleep(10), 0.06)
    # A call that ends in time is left alone, also after its deadline has passed.
    assert await with_deadline(asyncio.sleep(0.001, result="ok"), 0.06) == "ok"
    await asyncio.sleep(0.15)  # past the deadline and a tick: nothing may cancel us now


async def test_outside_cancellation_stays_a_cancellation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "WHEEL_MIN_TIMEOUT_S", 0.0)
    started = asyncio.Event()

    async def waiter() -> None:
        started.set()
        await with_deadline(asyncio.sleep(10), 5.0)

    task = asyncio.create_task(waiter())
    await started.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wheel_keeps_order_and_sleeps_when_empty() -> None:
    loop = asyncio.get_running_loop()
    wheel = DeadlineWheel(loop, resolution_s=0.01)
    gate = asyncio.Event()
    tasks = [asyncio.create_task(gate.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    entries = [wheel.arm(t, 0.03) for t in tasks]
    entries[1].task = None  # the middle call finished in time: disarmed
    await asyncio.wait(tasks, timeout=1.0, return_when=asyncio.ALL_COMPLETED)
    assert [t.cancelled() for t in (tasks[0], tasks[2])] == [True, True]
    assert not tasks[1].cancelled() and not tasks[1].done()
    assert [e.fired for e in entries] == [True, False, True]
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert wheel._ticker is None and not wheel._queues  # nothing armed: no more ticks
    gate.set()
    await tasks[1]
