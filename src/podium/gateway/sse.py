"""Server-Sent Events of a run: one event per journal entry, resumable with ``Last-Event-ID``.

Each event's ``id`` is the entry's sequence number in the run's journal, so a
client that reconnects with ``Last-Event-ID: 7`` gets entries 8, 9, … and
never a duplicate. Event names::

    model_reply    the model's turn (content and tool calls) at a step
    tool_result    one tool call's outcome
    compacted      older turns were summarized
    output_rejected  a reply failed the agent's output type (the feedback the model reads next)
    step_finished  a step was checkpointed (with its phase timings)
    final          the run ended (status, output, error, reason) — the last event; a
                   structured answer's ``output`` is a JSON value, with ``structured: true``
    approval_requested  a tool call waits for a human (the run is ``waiting``; the stream
                   stays open, with keep-alives, until the run resumes and ends)
    approval_decided    a human decided on one (who, when, what)
    final          the run ended (status, output, error, reason) — the last event
    error          the store stayed unreachable past the follower's grace (the stream ends)

With live tokens (:mod:`podium.gateway.live`) ``delta`` events come between them, and
``reset`` (``{"step": s}``): the step's model call started again, discard its deltas.

A step journaled whole (one ``StepRecord`` entry, the common case) is sent as
the same three kinds of event — ``model_reply``, a ``tool_result`` per call,
``step_finished`` — of which only the last carries the entry's ``id``: a client
cut off inside the group resumes from the previous id and gets the whole step
again. Journal kinds this module does not know are sent under their own tag
with their fields as-is. While nothing happens a ``: keep-alive`` comment is sent
every ``heartbeat_s``, and while the store is unreachable (the follower rides the
outage out and resumes where it was).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from podium.engine.profile import STEP_PHASES, StepProfile
from podium.engine.records import (
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.schemas import output_out
from podium.store.base import JournalItem, RunStore

__all__ = (
    "EVENT_NAMES",
    "KEEPALIVE",
    "MAX_EVENT_ID",
    "entry_frames",
    "event_name",
    "follow_journal",
    "format_event",
    "journal_events",
    "parse_last_event_id",
)

EVENT_NAMES: dict[str, str] = {
    "model": "model_reply",
    "tool": "tool_result",
    "compact": "compacted",
    "handoff": "handed_off",
    "step": "step_finished",
    "approval": "approval_requested",
    "decision": "approval_decided",
    "final": "final",
}
KEEPALIVE = b": keep-alive\n\n"
#: The largest event id a client may resume after (ids are journal sequence numbers).
MAX_EVENT_ID = 2**53 - 1
#: How long a follower rides out a store that is down before it gives up.
OUTAGE_GRACE_S = 120.0

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode


def _tag(entry: object) -> str:
    tag = getattr(getattr(type(entry), "__struct_config__", None), "tag", None)
    return tag if isinstance(tag, str) else type(entry).__name__.lower()


def event_name(entry: object) -> str:
    tag = _tag(entry)
    return EVENT_NAMES.get(tag, tag)


def _profile_data(p: StepProfile) -> dict[str, Any]:
    return {
        "tool_calls": p.tool_calls,
        "wall_ms": {n: w / 1e6 for n, w in zip(STEP_PHASES, p.wall_ns, strict=False)},
        "cpu_ms": {n: c / 1e6 for n, c in zip(STEP_PHASES, p.cpu_ns, strict=False)},
    }


def event_data(seq: int | None, entry: JournalEntry) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(entry)
    data.pop("type", None)
    if isinstance(entry, ModelTurn):  # the step's timings so far: step_finished has them all
        data.pop("profile", None)
    elif isinstance(entry, StepCommitted) and entry.profile is not None:
        data["profile"] = _profile_data(entry.profile)
    elif isinstance(entry, RunFinished) and entry.structured:
        data["output"] = output_out(entry)  # the answer as JSON, not a string holding it
    elif isinstance(entry, OutputRejected) and entry.profile is not None:
        data["profile"] = _profile_data(entry.profile)
    if seq is not None:
        data["seq"] = seq
    return data


def entry_events(seq: int, entry: JournalEntry) -> list[tuple[str, dict[str, Any]]]:
    """The (name, data) events of one journal entry, in order."""
    if not isinstance(entry, StepRecord):
        return [(event_name(entry), event_data(seq, entry))]
    turn = ModelTurn(entry.step, entry.ts, entry.message, entry.usage)
    events = [("model_reply", event_data(seq, turn))]
    for index, result in enumerate(entry.results):
        outcome = ToolOutcome(entry.step, entry.ts, index, result)
        events.append(("tool_result", event_data(seq, outcome)))
    events.append(
        ("step_finished", event_data(seq, StepCommitted(entry.step, entry.ts, entry.profile)))
    )
    return events


def format_event(seq: int | None, name: str, data: object) -> bytes:
    """One SSE frame (``data`` as one line of JSON)."""
    head = b"" if seq is None else b"id: %d\n" % seq
    return head + b"event: " + name.encode() + b"\ndata: " + _encode(data) + b"\n\n"


def parse_last_event_id(value: str | None) -> int:
    """The sequence number to resume after (-1: from the start; junk counts as -1)."""
    if value is None:
        return -1
    try:
        return max(-1, int(value.strip()))
    except ValueError:
        return -1


def final_from_record(record: RunRecord) -> bytes:
    """A ``final`` event for a run that ended without a journal entry (one dead-lettered
    before such ends were journaled, or a store that lost the entry)."""
    final = RunFinished(
        record.finished_at or 0.0,
        record.status,
        record.output,
        record.error,
        record.reason,
        record.structured,
    )
    return format_event(None, "final", event_data(None, final))


def entry_frames(seq: int, entry: JournalEntry) -> bytes:
    """The SSE frames of one journal entry (the last of them carries its id)."""
    events = entry_events(seq, entry)
    last = len(events) - 1
    return b"".join(
        format_event(seq if i == last else None, name, data)
        for i, (name, data) in enumerate(events)
    )


#: The last event of a stream a stopping server ends (its runs paused, or driven elsewhere):
#: the client reconnects, with ``Last-Event-ID``, to follow the run where it stands. The
#: ``retry`` field asks an EventSource to wait a second first.
SHUTTING_DOWN = b"retry: 1000\n" + format_event(None, "error", {"error": {
    "type": "shutting_down",
    "message": "the server is stopping; reconnect with Last-Event-ID to follow the run",
    "retry_after": 1,
}})


def unavailable_event(exc: BaseException) -> bytes:
    """The ``error`` event that ends a stream whose store stayed away too long."""
    error = {"type": "unavailable", "message": f"the run store is unreachable: {exc}"}
    return format_event(None, "error", {"error": error})


async def follow_journal(
    store: RunStore,
    run_id: str,
    after: int = -1,
    *,
    heartbeat_s: float = 10.0,
    outage_grace_s: float = OUTAGE_GRACE_S,
) -> AsyncIterator[bytes]:
    """SSE frames for the journal of ``run_id`` after ``after``, live until the run ends.

    While the store is unreachable the follower keeps trying, sending a keep-alive
    comment between attempts, and resumes where it was once the store is back; only an
    outage longer than ``outage_grace_s`` ends the stream (with an ``error`` event).
    """
    try:
        async for item in journal_events(
            store, run_id, after, heartbeat_s=heartbeat_s, outage_grace_s=outage_grace_s
        ):
            if isinstance(item, bytes):
                yield item
            elif isinstance(item, RunRecord):
                yield final_from_record(item)
            else:
                yield entry_frames(*item)
    except UNAVAILABLE as exc:
        yield unavailable_event(exc)


async def journal_events(
    store: RunStore,
    run_id: str,
    after: int = -1,
    *,
    heartbeat_s: float = 10.0,
    outage_grace_s: float = OUTAGE_GRACE_S,
) -> AsyncIterator[JournalItem | RunRecord | bytes]:
    """The journal of ``run_id`` after ``after``, live until the run ends.

    Yields journal items; :data:`KEEPALIVE` while nothing happens (and while the store
    is away); the run's record, last, if it ended without a final entry
    (see :func:`final_from_record`). An outage longer than ``outage_grace_s`` raises.
    """
    down_since: float | None = None
    delay = 0.1

    async def attempt(op: Callable[..., Awaitable[T]], *args: object) -> tuple[bool, T | None]:
        nonlocal down_since, delay
        try:
            result = await op(*args)
        except UNAVAILABLE:
            now = time.monotonic()
            down_since = down_since or now
            if now - down_since > outage_grace_s:
                raise
            return False, None
        down_since, delay = None, 0.1
        return True, result

    async def pause() -> None:
        nonlocal delay
        await asyncio.sleep(delay)
        delay = min(1.0, delay * 2)

    items: list[JournalItem] = []
    fetch = True  # the next step reads the journal (not waits on it)
    refetched = False
    while True:
        if fetch:
            ok, got = await attempt(store.journal, run_id, after)
            if not ok:
                yield KEEPALIVE
                await pause()
                continue
            items, fetch = got or [], False
        if not items:
            ok, record = await attempt(store.get, run_id)
            if not ok:
                yield KEEPALIVE
                await pause()
                continue
            if record is None:
                return
            if record.done:
                ok, final_seq = await attempt(_final_seq, store, run_id, after)
                if not ok:
                    yield KEEPALIVE
                    await pause()
                    continue
                if final_seq is None or refetched:
                    # It ended without a final entry: the record says how.
                    yield record
                    return
                if final_seq <= after:  # a resume after the end: it was sent before
                    return
                fetch = refetched = True  # it ended just now: send what came since
                continue
            ok, got = await attempt(store.wait_journal, run_id, after, heartbeat_s)
            if not ok:
                yield KEEPALIVE
                await pause()
                continue
            items = got or []
            if not items:
                yield KEEPALIVE
            continue
        for item in items:
            after = item[0]
            yield item
            if isinstance(item[1], RunFinished):
                return
        items, fetch = [], True


async def _final_seq(store: RunStore, run_id: str, after: int = -1) -> int | None:
    """The sequence number of the run's final journal entry, if it has one.

    The final entry is the journal's last: with nothing after ``after`` (the client's last
    event), it is the entry at ``after`` or there is none, so only the journal from there
    is read. A client reconnecting after a long run's end read and decoded all of it
    each time (25 ms a reconnect, growing with the run)."""
    if after >= 0:
        tail = await store.journal(run_id, after - 1)
        if tail:
            seq, entry = tail[-1]
            return seq if isinstance(entry, RunFinished) else None
    journal = await store.journal(run_id, -1)  # from the start (or an id past the end)
    return next((seq for seq, e in journal if isinstance(e, RunFinished)), None)
