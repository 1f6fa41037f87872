"""A run's journal seen as Responses API output items, and response ids.

One run can answer several responses: a response that ends with calls of the client's
tools is *resumed* by the client's outputs, and what the run does next is a new response
of the same run. A response is therefore a *segment* of a run, from a step on: its id is
``resp_<run>`` for the run's first, ``resp_<run>_<step>`` for the one that starts at
``step`` after a resume. :class:`Segment` turns journal entries into output items in
journal order, the same whether it reads a whole journal (``GET``) or follows it live
(a stream), so the items streamed and those in the final ``response`` agree, ids and
indices included:

- a model turn's text is a ``message`` item;
- a call of one of the agent's own tools is an ``mcp_call`` item with its output (a
  tool run on the server, as OpenAI shows its hosted tools), once its outcome is in;
- a call of a client tool is a ``function_call`` item, and the segment ends with its step.
"""

from __future__ import annotations

import re

from podium.engine.approvals import INTERRUPTED
from podium.engine.records import (
    ApprovalRequested,
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepRecord,
    ToolOutcome,
)
from podium.gateway.client_tools import visible_call_id
from podium.gateway.responses_schemas import (
    FunctionCallItem,
    InputTokensDetails,
    McpCallItem,
    MessageItem,
    OutputItem,
    OutputText,
    OutputTokensDetails,
    ResponseError,
    ResponseObject,
    ResponseUsage,
)
from podium.messages import Message, Usage
from podium.output import FINAL_TOOL
from podium.tools.client import client_tool_names
from podium.tools.executor import ToolResult

__all__ = ("SERVER_LABEL", "Segment", "parse_response_id", "response_id", "response_object")

#: The ``server_label`` of the agent's own tool calls.
SERVER_LABEL = "podium"
_RESPONSE_ID = re.compile(r"resp_([0-9a-f]{1,64})(?:_(\d{1,9}))?")


def response_id(run_id: str, from_step: int = 0) -> str:
    base = "resp_" + run_id.removeprefix("run_")
    return base if from_step == 0 else f"{base}_{from_step}"


def parse_response_id(rid: str) -> tuple[str, int] | None:
    """``(run_id, from_step)`` of an id :func:`response_id` made; None for another."""
    m = _RESPONSE_ID.fullmatch(rid)
    if m is None:
        return None
    return "run_" + m[1], int(m[2] or 0)


class Segment:
    """The output items of the response of ``record``'s run from ``from_step`` on, fed
    journal entries in order (:meth:`feed` returns the items each one completes)."""

    def __init__(self, record: RunRecord, from_step: int = 0) -> None:
        self.run_id = record.run_id
        self.hex = record.run_id.removeprefix("run_")
        self.from_step = from_step
        self.structured = record.structured
        self.client = client_tool_names(record.metadata)
        self.items: list[OutputItem] = []
        self.usage = Usage()
        #: The step whose client-tool calls end the segment (None: not ended so).
        self.parked: int | None = None
        self._calls: dict[tuple[int, int], tuple[str, str, str]] = {}  # (id, name, args)
        self._finished: RunFinished | None = None

    # -- ids ---------------------------------------------------------------------------------

    def message_id(self, step: int) -> str:
        return f"msg_{self.hex}_{step}"

    def _call_item_id(self, kind: str, step: int, index: int) -> str:
        return f"{kind}_{self.hex}_{step}_{index}"

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, entry: JournalEntry) -> list[OutputItem]:
        step = getattr(entry, "step", None)
        if isinstance(entry, RunFinished):
            self._finished = entry
            if self.structured and entry.status == "completed" and self.parked is None:
                return self._add([self._message(-1, entry.output or "")])
            return []
        if step is None or step < self.from_step:
            return []
        if self.parked is not None and step > self.parked:
            return []  # the run went on after the client's outputs: the next response's
        if isinstance(entry, StepRecord | ModelTurn):
            self.usage = self.usage + entry.usage
            return self._add(self._turn(step, entry.message, entry))
        if isinstance(entry, OutputRejected):  # an invalid answer asked again: not output
            self.usage = self.usage + entry.usage
            return []
        if isinstance(entry, ToolOutcome):
            if entry.result.error == INTERRUPTED:
                return []  # the tool asks: its request (for the client, or a human) follows
            call = self._calls.pop((step, entry.index), None)
            if call is None:
                return []
            return self._add([self._server_call(step, entry.index, call, entry.result)])
        if isinstance(entry, ApprovalRequested) and entry.kind == "interrupt" and (
            entry.tool in self.client
        ):
            self._calls.pop((step, entry.index), None)
            self.parked = step
            return self._add([FunctionCallItem(
                self._call_item_id("fc", step, entry.index),
                visible_call_id(self.run_id, step, entry.index),
                entry.tool, entry.arguments, "completed",
            )])
        return []

    def _add(self, items: list[OutputItem]) -> list[OutputItem]:
        self.items.extend(items)
        return items

    def _message(self, step: int, text: str) -> MessageItem:
        mid = self.message_id(step) if step >= 0 else f"msg_{self.hex}_answer"
        return MessageItem(mid, "completed", [OutputText(text)])

    def _turn(
        self, step: int, message: Message, entry: StepRecord | ModelTurn
    ) -> list[OutputItem]:
        items: list[OutputItem] = []
        if message.content and not self.structured:
            items.append(self._message(step, message.content))
        results = entry.results if isinstance(entry, StepRecord) else ()
        for index, call in enumerate(message.tool_calls):
            if self.structured and call.name == FINAL_TOOL:
                continue
            key = (call.id, call.name, call.arguments)
            if index < len(results):
                items.append(self._server_call(step, index, key, results[index]))
            else:  # its outcome (or, for a client tool, its request) comes in a later entry
                self._calls[(step, index)] = key
        return items

    def _server_call(
        self, step: int, index: int, call: tuple[str, str, str], result: ToolResult
    ) -> McpCallItem:
        _, name, arguments = call
        item_id = self._call_item_id("mcp", step, index)
        if result.ok:
            return McpCallItem(item_id, SERVER_LABEL, name, arguments, result.content)
        error = {"type": "mcp_tool_execution_error",
                 "content": [{"type": "text", "text": result.content}]}
        return McpCallItem(item_id, SERVER_LABEL, name, arguments, result.content, error,
                           "failed")

    # -- the response ------------------------------------------------------------------------

    def status(self, record: RunRecord) -> str:
        if self.parked is not None:
            return "completed"  # a response that hands calls to the client is complete
        if record.status == "completed":
            return "completed"
        if record.status == "cancelled":
            return "cancelled"
        if record.status == "failed":
            return "failed"
        return "queued" if record.status == "queued" and record.started_at is None else (
            "in_progress"
        )

    def response_usage(self) -> ResponseUsage:
        u = self.usage
        return ResponseUsage(
            u.input_tokens, u.output_tokens, u.input_tokens + u.output_tokens,
            InputTokensDetails(u.cached_tokens), OutputTokensDetails(),
        )


def response_object(segment: Segment, record: RunRecord, **fields: object) -> ResponseObject:
    """The ``response`` for ``segment`` of ``record``'s run as it stands (``fields``: what
    the request said of itself: ``instructions``, ``tools``, ``store``…)."""
    status = segment.status(record)
    error = None
    if status in ("failed", "cancelled"):
        error = ResponseError(
            "server_error",
            f"run {record.run_id} {record.status} ({record.reason}): {record.error}",
        )
    return ResponseObject(
        response_id(record.run_id, segment.from_step),
        record.created_at,
        record.agent,
        status,  # type: ignore[arg-type]  # one of the Literal's
        list(segment.items),
        segment.response_usage(),
        error,
        **fields,  # type: ignore[arg-type]
    )
