"""The blocking-call detector names the code that holds the event loop."""

from __future__ import annotations

import asyncio
import importlib.util
import linecache
import logging
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from podium import Agent, Engine, FunctionModel, tool, tool_call_reply
from podium.observe.blocking import (
    NO_CALLBACK,
    BlockingDetector,
    BlockingEvent,
    _culprit,
    detector_from_env,
)

pytestmark = pytest.mark.anyio


@tool
async def fetch_invoice_synchronously(order: str) -> str:
    """A tool that calls a synchronous SDK from a coroutine: the bug the detector finds."""
    time.sleep(0.25)  # noqa: ASYNC251 - the bug under test
    return f"invoice for {order}"


def _agent() -> Agent:
    replies = [tool_call_reply(("fetch_invoice_synchronously", '{"order": "A-1"}')), "done"]
    model = FunctionModel(lambda messages, request: replies[min(request.step, 1)])
    return Agent("blocky", model, tools=[fetch_invoice_synchronously])


async def test_a_blocking_tool_is_named_in_the_log_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    named = asyncio.Event()

    def on_block(event: BlockingEvent) -> None:
        if "fetch_invoice_synchronously" in event.culprit:
            named.set()

    detector = BlockingDetector(threshold_ms=20, on_block=on_block)
    detector.start()
    try:
        with caplog.at_level(logging.WARNING, logger="podium.observe.blocking"):
            async with Engine() as engine:
                record = await engine.run(_agent(), "where is my invoice?")
            await named.wait()  # the heartbeat that notices the stall runs right after it
    finally:
        detector.stop()
    assert record.status == "completed"
    stats = detector.statistics()
    assert stats.blocks >= 1
    event = next(e for e in stats.recent if "fetch_invoice_synchronously" in e.culprit)
    assert event.blocked_ms >= 20
    assert any("time.sleep(0.25)" in line for line in event.stack)
    assert "fetch_invoice_synchronously" in caplog.text
    assert "event loop blocked" in caplog.text


async def test_a_loop_that_never_blocks_counts_nothing() -> None:
    detector = BlockingDetector(threshold_ms=1000)
    detector.start()
    for _ in range(20):
        await asyncio.sleep(0.002)
    detector.stop()
    assert detector.statistics().blocks == 0
    assert not detector.running


async def test_a_loop_starved_between_callbacks_is_not_blamed_on_the_code_that_started_it() -> (
    None
):
    """When the process gets no CPU (a busy host, a container's CPU limit) or another thread
    holds the GIL, the watchdog samples the loop's thread waiting inside the loop: the stall
    names no callback, not the frame that called ``asyncio.run`` (``podium serve``'s)."""
    loop_thread = threading.get_ident()

    def sample_the_loop() -> traceback.StackSummary:
        return traceback.extract_stack(sys._current_frames()[loop_thread])

    await asyncio.to_thread(lambda: None)  # the executor's thread exists: no start to wait on
    waiting = await asyncio.to_thread(sample_the_loop)  # the loop waits for it meanwhile
    assert _culprit(waiting) == NO_CALLBACK, waiting.format()


def test_the_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODIUM_BLOCKING_MS", raising=False)
    default = detector_from_env()
    assert default is not None and default.threshold_s == pytest.approx(0.020)
    monkeypatch.setenv("PODIUM_BLOCKING_MS", "75")
    custom = detector_from_env()
    assert custom is not None and custom.threshold_s == pytest.approx(0.075)
    monkeypatch.setenv("PODIUM_BLOCKING_MS", "off")
    assert detector_from_env() is None


async def test_a_sampled_stack_keeps_no_source_file_in_memory(tmp_path: Path) -> None:
    """The stack's source lines are read for the report, not left in ``linecache`` (global,
    never emptied): a month of stalls in ever new places must not hold every file they
    passed through. Measured in a soak as megabytes of RSS growth in minutes."""
    module = tmp_path / "podium_stall_probe.py"
    module.write_text("import time\n\n\ndef stall_in_a_fresh_file():\n    time.sleep(0.25)\n")
    spec = importlib.util.spec_from_file_location("podium_stall_probe", module)
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    named = asyncio.Event()
    events: list[BlockingEvent] = []

    def on_block(event: BlockingEvent) -> None:
        if "stall_in_a_fresh_file" in event.culprit:
            events.append(event)
            named.set()

    detector = BlockingDetector(threshold_ms=20, on_block=on_block)
    detector.start()
    try:
        probe.stall_in_a_fresh_file()
        await named.wait()
    finally:
        detector.stop()
    assert any("time.sleep(0.25)" in line for line in events[0].stack)  # still shown
    assert str(module) not in linecache.cache
