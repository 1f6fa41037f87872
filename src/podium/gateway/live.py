"""A run's journal with its live model tokens woven in: what streaming clients receive.

The journal follower (:func:`~podium.gateway.sse.journal_events`) and a token
subscription run side by side; their outputs are merged so that the deltas of
step ``s`` come after every journal event of the steps before it and before the
step's own ``model_reply``:

- a delta of a step whose model turn is already journaled is dropped (the
  ``model_reply`` event has the whole text);
- a delta of a step the journal has not reached yet (its previous step's
  ``step_finished`` not read) waits until the journal catches up;
- a delta below what was sent of its step (its ``offset``) is dropped, or cut to its
  part not sent yet;
- a reset (the step's model call started again: another backend after a fail-over
  mid-stream, another worker after the first one died, a malformed reply asked again)
  is sent on when deltas of its step were sent, so the client discards them.

Deltas carry no event id: resuming with ``Last-Event-ID`` is at step granularity.
A client that reconnects mid-step gets the journal events after its id, then the
current step's deltas from the moment it subscribed (the part of the step it
missed arrives whole in that step's ``model_reply``); when no other client was
listening, the step it reconnects into was called unstreamed and only its
``model_reply`` comes, and deltas resume with the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from podium.engine.records import JournalEntry, ModelTurn, RunRecord, StepCommitted, StepRecord
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.sse import (
    OUTAGE_GRACE_S,
    entry_frames,
    final_from_record,
    format_event,
    journal_events,
    unavailable_event,
)
from podium.store.base import JournalItem, RunStore
from podium.streaming.base import StepOffsets, TokenDelta, TokenSubscription

__all__ = ("LiveFrames", "LiveItem", "follow_live", "live_events")

#: What :func:`live_events` yields: a journal item, the deltas ready to send, a
#: keep-alive frame, or the record of a run that ended without a final entry.
LiveItem = JournalItem | list[TokenDelta] | bytes | RunRecord

#: Deltas held while the journal catches up, at most (more are dropped: the step's
#: ``model_reply`` carries its text anyway).
_HELD_MAX = 4096
#: Journal items and batches of deltas waiting for a client to take them, at most.
_QUEUED_MAX = 8
_JOURNAL, _DELTAS = 0, 1


async def live_events(
    store: RunStore,
    run_id: str,
    after: int = -1,
    tokens: TokenSubscription | None = None,
    *,
    heartbeat_s: float = 10.0,
    outage_grace_s: float = OUTAGE_GRACE_S,
) -> AsyncGenerator[LiveItem, None]:
    """The journal of ``run_id`` after ``after`` (as :func:`journal_events`), with the
    deltas of ``tokens`` in between, ordered as the module docstring says.

    ``tokens`` must have been subscribed before this is called (so no delta falls
    between the journal read and the subscription); without it only the journal comes.
    """
    if tokens is None:
        async for item in journal_events(
            store, run_id, after, heartbeat_s=heartbeat_s, outage_grace_s=outage_grace_s
        ):
            yield item
        return
    # Bounded: a client that stops reading stops the pumps here, so its deltas back up
    # into the subscription, which drops them past its own bound (the step's model_reply
    # has the text); unbounded, the server held every delta of the run for it (17 MB for
    # one client a probe left asleep), and the subscription's bound never applied.
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue(_QUEUED_MAX)

    async def pump_journal() -> None:
        # From the start: the steps before ``after`` tell which deltas are current.
        try:
            async for item in journal_events(
                store, run_id, -1, heartbeat_s=heartbeat_s, outage_grace_s=outage_grace_s
            ):
                await queue.put((_JOURNAL, item))
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put((_JOURNAL, exc))
            return
        await queue.put((_JOURNAL, None))

    async def pump_tokens() -> None:
        sub = tokens
        assert sub is not None
        while True:
            await queue.put((_DELTAS, await sub.get()))

    tasks = [asyncio.ensure_future(pump_journal()), asyncio.ensure_future(pump_tokens())]
    turned = committed = -1  # the last step whose model turn / end the journal holds
    held: list[TokenDelta] = []
    sent = StepOffsets()  # a model call made again (another worker) streams from 0 again
    try:
        while True:
            source, item = await queue.get()
            if source == _DELTAS:
                ready = []
                for delta in item:
                    if delta.step <= turned:
                        continue
                    if delta.step <= committed + 1 and not held:
                        ready.append(delta)
                    elif len(held) < _HELD_MAX:
                        held.append(delta)
                if ready:
                    ready = sent.unsent(ready)
                    if ready:
                        yield ready
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, tuple):
                seq, entry = item
                if isinstance(entry, StepRecord):
                    turned = committed = entry.step
                    sent.forget(entry.step)
                elif isinstance(entry, ModelTurn):
                    turned = entry.step
                    sent.forget(entry.step)
                elif isinstance(entry, StepCommitted):
                    committed = entry.step
                if seq > after:
                    yield item
                if held:
                    ready = [d for d in held if turned < d.step <= committed + 1]
                    held = [d for d in held if d.step > committed + 1]
                    if ready:
                        ready = sent.unsent(ready)
                    if ready:
                        yield ready
                continue
            yield item
    finally:
        # No await here: this may run in a cancelled task (the client hung up).
        for task in tasks:
            task.cancel()
        tokens.close()


class _SharedFrames:
    """The SSE frames of large journal entries, encoded once for every client that follows
    the run: per client, 200 followers of a run with a 2 MB answer held the loop 4.2 s
    encoding the same entry 200 times (and each kept its own copy). Small entries are
    encoded each time (cheaper than keeping them); the kept ones are bounded in bytes."""

    def __init__(self, min_bytes: int = 8192, max_bytes: int = 32 << 20) -> None:
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self._kept: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0

    def frames(self, run_id: str, seq: int, entry: JournalEntry) -> bytes:
        key = (run_id, seq)  # a journal entry never changes once written
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        frames = entry_frames(seq, entry)
        if self.min_bytes <= len(frames) <= self.max_bytes // 4:
            self._kept[key] = frames
            self._size += len(frames)
            while self._size > self.max_bytes:
                _, dropped = self._kept.popitem(last=False)
                self._size -= len(dropped)
        return frames


_FRAMES = _SharedFrames()


def delta_frames(deltas: list[TokenDelta]) -> bytes:
    """One ``delta`` SSE event per delta, without ids (deltas are not resumable); a
    reset is a ``reset`` event: ``{"step": s}``, discard the step's deltas so far."""
    return b"".join(
        format_event(None, "reset", {"step": d.step})
        if d.reset
        else format_event(None, "delta", d)
        for d in deltas
    )


async def follow_live(
    store: RunStore,
    run_id: str,
    after: int = -1,
    tokens: TokenSubscription | None = None,
    *,
    heartbeat_s: float = 10.0,
    outage_grace_s: float = OUTAGE_GRACE_S,
) -> AsyncIterator[bytes]:
    """SSE frames of :func:`live_events`: journal events, ``delta`` events between them."""
    events = live_events(
        store, run_id, after, tokens, heartbeat_s=heartbeat_s, outage_grace_s=outage_grace_s
    )
    try:
        async for item in events:
            if isinstance(item, bytes):
                yield item
            elif isinstance(item, list):
                yield delta_frames(item)
            elif isinstance(item, RunRecord):
                yield final_from_record(item)
            else:
                yield _FRAMES.frames(run_id, *item)
    except UNAVAILABLE as exc:
        yield unavailable_event(exc)
    finally:
        await events.aclose()


class LiveFrames:
    """An SSE body that closes its token subscription however the response ends,
    even if the client left before the body was first read (the generator then
    never ran, and its own cleanup with it).

    :meth:`shut` ends it early, between two frames or while it waits for the next:
    ``farewell`` (an event telling the client to reconnect) is its last frame. A
    stopping server does this to every stream it still holds once its runs have paused,
    so no client is cut off mid-event when the server's grace runs out. It gives each
    stream a moment (``settle_s``) first: what is journaled already, or comes within it
    (the ``final`` of a run that ended in the drain, its notification still on the way),
    is delivered, and a stream that ends on its own gets no farewell.
    """

    __slots__ = (
        "__weakref__", "_cut_timer", "_farewell", "_frames", "_reading", "_shut", "_tokens",
    )

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        tokens: TokenSubscription | None,
        farewell: bytes = b"",
    ) -> None:
        self._frames = frames
        self._tokens = tokens
        self._farewell = farewell
        self._shut = False
        self._reading: asyncio.Task[Any] | None = None  # the task awaiting the next frame
        self._cut_timer: asyncio.TimerHandle | None = None  # a shut's settle window

    def __aiter__(self) -> LiveFrames:
        return self

    async def __anext__(self) -> bytes:
        if self._shut:
            return self._last_frame()
        task = self._reading = asyncio.current_task()
        try:
            return await anext(self._frames)
        except StopAsyncIteration:
            self._cancel_cut()  # ended on its own: no farewell, no cut to come
            raise
        except asyncio.CancelledError:
            if not self._was_shut() or task is None or task.cancelling() > 1:
                raise  # the client left, or the server is going down: not ours to keep
            task.uncancel()  # cancelled by shut(): end with the farewell instead
            return self._last_frame()
        finally:
            self._reading = None

    def _was_shut(self) -> bool:
        return self._shut  # (read anew: shut() may have run while the frame was awaited)

    def shut(self, settle_s: float = 0.0) -> None:
        """End the stream: its farewell is its last frame. With ``settle_s``, frames that
        come within that many seconds are delivered first (the stream may end on its own
        meanwhile); then, or at once without it, the wait for the next frame is cut."""
        if self._shut or self._cut_timer is not None:
            return
        if settle_s > 0:
            self._cut_timer = asyncio.get_running_loop().call_later(settle_s, self._cut)
        else:
            self._cut()

    def _cut(self) -> None:
        self._cut_timer = None
        if self._shut:
            return
        self._shut = True
        if self._reading is not None:
            self._reading.cancel()

    def _cancel_cut(self) -> None:
        if self._cut_timer is not None:
            self._cut_timer.cancel()
            self._cut_timer = None

    def _last_frame(self) -> bytes:
        farewell, self._farewell = self._farewell, b""
        if not farewell:
            raise StopAsyncIteration
        return farewell

    async def aclose(self) -> None:
        self._cancel_cut()
        close = getattr(self._frames, "aclose", None)
        if close is not None:
            await close()
        self._release()

    def _release(self) -> None:
        if self._tokens is not None:
            self._tokens.close()
            self._tokens = None

    def __del__(self) -> None:
        # No running loop left (interpreter shut-down): nothing to tell.
        with contextlib.suppress(RuntimeError):
            self._release()
