"""The SSE framing: keep-alives while a run is quiet, a final event for runs without one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from podium.engine.records import RunRecord
from podium.gateway.live import LiveFrames
from podium.gateway.sse import KEEPALIVE, follow_journal, parse_last_event_id
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


async def test_a_quiet_run_gets_keep_alives() -> None:
    store = MemoryRunStore()
    await store.create(RunRecord("r1", "a", "q", status="running"))
    frames = follow_journal(store, "r1", heartbeat_s=0.01)
    assert await anext(frames) == KEEPALIVE
    await frames.aclose()


async def test_a_run_ended_without_a_final_entry_still_gets_a_final_event() -> None:
    store = MemoryRunStore()
    await store.create(
        RunRecord("r2", "a", "q", status="failed", reason="dead_letter", error="delivered 4 times")
    )
    frames = [f async for f in follow_journal(store, "r2")]
    assert len(frames) == 1 and frames[0].startswith(b"event: final\n")
    assert b'"reason":"dead_letter"' in frames[0]


@pytest.mark.parametrize(
    ("value", "after"), [(None, -1), ("7", 7), (" 3 ", 3), ("x", -1), ("-5", -1)]
)
def test_last_event_id_parsing(value: str | None, after: int) -> None:
    assert parse_last_event_id(value) == after


async def _never() -> AsyncIterator[bytes]:
    yield b"first\n\n"
    await asyncio.Event().wait()  # a quiet run
    yield b"unreachable\n\n"


async def test_a_shut_stream_ends_with_its_farewell_even_while_it_waits() -> None:
    body = LiveFrames(_never(), None, b"farewell\n\n")
    assert await anext(body) == b"first\n\n"
    reading = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)  # it waits for the next frame
    body.shut()
    assert await reading == b"farewell\n\n"
    with pytest.raises(StopAsyncIteration):
        await anext(body)
    await body.aclose()


async def test_a_stream_shut_between_frames_says_farewell_next() -> None:
    body = LiveFrames(_never(), None, b"farewell\n\n")
    body.shut()
    assert [frame async for frame in body] == [b"farewell\n\n"]


async def test_a_client_leaving_is_still_a_cancellation() -> None:
    body = LiveFrames(_never(), None, b"farewell\n\n")
    assert await anext(body) == b"first\n\n"
    reading = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)
    reading.cancel()  # what the server does when the client hangs up
    with pytest.raises(asyncio.CancelledError):
        await reading
    await body.aclose()


async def _journaled(
    frames: list[bytes], more: asyncio.Event | None = None
) -> AsyncIterator[bytes]:
    """A run's journal as a follower reads it: what is written, then (``more``) what comes."""
    for frame in frames:
        yield frame
    if more is not None:
        await more.wait()
        yield b"final\n\n"


async def test_a_stopping_server_delivers_what_is_journaled_before_its_farewell() -> None:
    """The run ended in the drain; its stream had read only the first event: the rest,
    ``final`` included, is delivered and the stream ends on its own, with no farewell
    (before: the farewell came next, and the client never saw the run's end)."""
    body = LiveFrames(_journaled([b"a\n\n", b"b\n\n", b"final\n\n"]), None, b"farewell\n\n")
    assert await anext(body) == b"a\n\n"
    body.shut(settle_s=30.0)
    assert [frame async for frame in body] == [b"b\n\n", b"final\n\n"]
    await body.aclose()


async def test_a_final_on_its_way_when_the_server_stops_still_arrives() -> None:
    more = asyncio.Event()
    body = LiveFrames(_journaled([b"a\n\n"], more), None, b"farewell\n\n")
    assert await anext(body) == b"a\n\n"
    reading = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)  # it waits for the notification of the run's end
    body.shut(settle_s=30.0)
    more.set()  # ... which comes within the settle window
    assert await reading == b"final\n\n"
    assert [frame async for frame in body] == []
    await body.aclose()


async def test_a_quiet_stream_gets_its_farewell_once_the_settle_window_ends() -> None:
    body = LiveFrames(_never(), None, b"farewell\n\n")
    assert await anext(body) == b"first\n\n"
    reading = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)
    body.shut(settle_s=0.01)  # a paused run: nothing comes; the wait is cut
    assert await reading == b"farewell\n\n"
    with pytest.raises(StopAsyncIteration):
        await anext(body)
    await body.aclose()
