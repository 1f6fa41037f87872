"""``POST /v1/responses`` with ``stream: true``: the Responses API's typed events.

``response.created`` and ``response.in_progress`` at once; then, per output item,
``response.output_item.added``, its content (``response.content_part.added``, one
``response.output_text.delta`` per model token as the backend produces it,
``response.output_text.done``, ``response.content_part.done``; for a client tool's call
``response.function_call_arguments.delta`` and ``.done``), ``response.output_item.done``;
last ``response.completed`` (or ``response.failed``) with the whole response. Every event
has its ``sequence_number``. Items come from :class:`~podium.gateway.responses_view.Segment`,
so they are those (ids, indices) of the final response.

A step whose model call starts again after part of its text was sent (its backend lost
mid-stream, its worker dead) ends the stream with an ``error`` event (code
``stream_reset``): text cannot be taken back, and is never spliced with the new one. So
do a run that waits for a human (``run_waiting``) and a wait past ``wait_timeout_s``
(``timeout``); such an event also carries an ``error`` object, so OpenAI's SDKs raise it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from podium.engine.records import ApprovalRequested, RunFinished, RunRecord
from podium.gateway.errors import ApiError, run_still_going, run_waiting
from podium.gateway.live import live_events
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.responses_schemas import (
    FunctionCallItem,
    McpCallItem,
    MessageItem,
    OutputItem,
    OutputText,
)
from podium.gateway.responses_view import Segment, response_object
from podium.gateway.service import Gateway
from podium.streaming.base import TokenDelta, TokenSubscription

__all__ = ("SHUTTING_DOWN", "response_events")

_encode = msgspec.json.Encoder().encode
_WAIT_ERRORS: tuple[type[BaseException], ...] = (ApiError, *UNAVAILABLE)


def _frame(kind: str, body: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _encode(body) + b"\n\n"


def _error_body(code: str, message: str, seq: int) -> dict[str, Any]:
    # ``error`` besides the typed fields: OpenAI's SDKs raise an event that has one.
    return {"type": "error", "code": code, "message": message, "param": None,
            "sequence_number": seq, "error": {"type": code, "message": message}}


#: A stopping server's last event (the run goes on: its response can be read back).
SHUTTING_DOWN = _frame("error", _error_body(
    "shutting_down",
    "the server is stopping; the run goes on: GET /v1/responses/{id} for its end", 0,
))


class _Emitter:
    """Numbers the events and tracks the message whose tokens are being streamed."""

    def __init__(self) -> None:
        self.seq = 0
        self.open_step: int | None = None  # the step whose message is open
        self.open_index = 0
        self.streamed: list[str] = []

    def event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return _frame(kind, body)

    def error(self, code: str, message: str) -> bytes:
        frame = _frame("error", _error_body(code, message, self.seq))
        self.seq += 1
        return frame

    def open_message(self, item_id: str, index: int) -> bytes:
        shell = MessageItem(item_id, "in_progress", [])
        return self.event("response.output_item.added", output_index=index, item=shell) + (
            self.event("response.content_part.added", item_id=item_id, output_index=index,
                       content_index=0, part=OutputText(""))
        )

    def text(self, item_id: str, index: int, delta: str) -> bytes:
        return self.event("response.output_text.delta", item_id=item_id, output_index=index,
                          content_index=0, delta=delta, logprobs=[])

    def item(self, item: OutputItem, index: int) -> bytes:
        """The events of one finished item (its message opened already if it streamed)."""
        if isinstance(item, MessageItem):
            text = item.content[0].text if item.content else ""
            out = b""
            if self.open_step is not None and self.open_index == index:
                got = "".join(self.streamed)
                rest = text[len(got):] if text.startswith(got) else ""
                self.open_step, self.streamed = None, []
            else:
                out += self.open_message(item.id, index)
                rest = text
            if rest:
                out += self.text(item.id, index, rest)
            return out + self.event(
                "response.output_text.done", item_id=item.id, output_index=index,
                content_index=0, text=text, logprobs=[],
            ) + self.event(
                "response.content_part.done", item_id=item.id, output_index=index,
                content_index=0, part=OutputText(text),
            ) + self.event("response.output_item.done", output_index=index, item=item)
        if isinstance(item, FunctionCallItem):
            shell = msgspec.structs.replace(item, arguments="", status="in_progress")
            return self.event("response.output_item.added", output_index=index, item=shell) + (
                self.event("response.function_call_arguments.delta", item_id=item.id,
                           output_index=index, delta=item.arguments)
            ) + self.event(
                "response.function_call_arguments.done", item_id=item.id, output_index=index,
                name=item.name, arguments=item.arguments,
            ) + self.event("response.output_item.done", output_index=index, item=item)
        assert isinstance(item, McpCallItem)
        running = msgspec.structs.replace(item, output=None, error=None, status="in_progress")
        return self.event("response.output_item.added", output_index=index, item=running) + (
            self.event("response.output_item.done", output_index=index, item=item)
        )


def _reset_message(run_id: str) -> str:
    return (
        f"run {run_id}: the model's answer started again (its backend was lost mid-stream)"
        " after part of it was sent; discard the text received: the run goes on, and"
        f" GET /v1/runs/{run_id} gives its answer"
    )


async def response_events(
    gw: Gateway,
    record: RunRecord,
    from_step: int,
    after: int,
    tokens: TokenSubscription | None,
    wait_s: float,
    fields: dict[str, Any],
) -> AsyncIterator[bytes]:
    """The events of the response of ``record``'s run from ``from_step`` (its journal read
    after entry ``after``), for up to ``wait_s`` seconds."""
    run_id = record.run_id
    em = _Emitter()
    segment = Segment(record, from_step)
    start = response_object(segment, record, **fields)
    start = msgspec.structs.replace(start, status="in_progress", usage=None)
    yield em.event("response.created", response=start)
    yield em.event("response.in_progress", response=start)

    def emit(items: list[OutputItem]) -> bytes:
        first = len(segment.items) - len(items)
        return b"".join(em.item(it, first + i) for i, it in enumerate(items))

    deadline = time.monotonic() + wait_s
    ended: RunRecord | None = None
    last = after
    events = live_events(gw.store, run_id, after, tokens)
    try:
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    item = await anext(events)
            except (StopAsyncIteration, TimeoutError):
                break
            if isinstance(item, list):
                out, reset = _deltas(em, segment, item)
                yield out
                if reset:
                    yield em.error("stream_reset", _reset_message(run_id))
                    return
            elif isinstance(item, tuple):
                last, entry = item
                yield emit(segment.feed(entry))
                if isinstance(entry, RunFinished | ApprovalRequested):
                    break  # it ended, or it parks (the rest of its entries: read below)
            elif isinstance(item, RunRecord):
                ended = item
                break
            else:
                yield item  # a keep-alive comment
        record = ended or await gw.wait(run_id, 0)
        # What was journaled with the entry that ended the loop (the other calls a
        # parked step hands out), or after a record that ended without a final entry.
        for _, entry in await gw.store.journal(run_id, last):
            yield emit(segment.feed(entry))
    except _WAIT_ERRORS as exc:
        message = exc.message if isinstance(exc, ApiError) else "the run store is unreachable"
        yield em.error("unavailable", f"run {run_id}: {message}")
        return
    finally:
        await events.aclose()
    if segment.parked is not None or record.status == "completed":
        yield em.event("response.completed", response=response_object(segment, record, **fields))
    elif record.done:
        yield em.event("response.failed", response=response_object(segment, record, **fields))
    elif record.status == "waiting":
        yield em.error("run_waiting", run_waiting(run_id))
    else:
        yield em.error("timeout", run_still_going(run_id, wait_s))


def _deltas(em: _Emitter, segment: Segment, deltas: list[TokenDelta]) -> tuple[bytes, bool]:
    """The text events of a batch of token deltas; whether one voids text already sent."""
    out = b""
    for d in deltas:
        if d.reset and em.open_step == d.step and em.streamed:
            return out, True
        if not d.content or segment.structured or d.step < segment.from_step:
            continue
        item_id = segment.message_id(d.step)
        if em.open_step != d.step:
            em.open_step, em.open_index, em.streamed = d.step, len(segment.items), []
            out += em.open_message(item_id, em.open_index)
        em.streamed.append(d.content)
        out += em.text(item_id, em.open_index, d.content)
    return out, False
