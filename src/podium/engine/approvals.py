"""Human approval and interrupts, sans-I/O: which calls wait, what a decision means.

A tool call waits for a human when its tool ``requires_approval`` (and its
policy function says so for these arguments), or when the tool raised
:class:`~podium.errors.Interrupt`. The driver then journals the step's model
turn, the outcomes of the calls that needed no one, one
:class:`~podium.engine.records.ApprovalRequested` per waiting call, and the
record ``waiting`` — one write — and lets the run go: no worker holds it, no
lease runs. A decision is journaled as an
:class:`~podium.engine.records.ApprovalDecided`; the last one of the step puts
the run back ``queued`` and it resumes on any worker from its journal:

- ``approve``: the call runs then (with the human's edited arguments, if any);
- ``reject``: the model reads the human's message as the call's result;
- ``answer`` (an interrupt): the answer is the call's result. The tool is not
  called again, so whatever it did before asking is never repeated.

Nothing here awaits; :mod:`podium.engine.decisions` does the store I/O.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from podium.engine.records import (
    ApprovalDecided,
    ApprovalRequested,
    JournalEntry,
    ModelTurn,
    RunRecord,
    StepCommitted,
    StepRecord,
    Waiting,
)
from podium.errors import DecisionError
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.step import PlannedCall
    from podium.tools.tool import Tool

__all__ = (
    "INTERRUPTED",
    "SUBAGENT_WAITING",
    "PendingApproval",
    "decided_result",
    "gate",
    "open_requests",
    "pending_approvals",
    "waiting_for",
)

#: ``ToolResult.error`` of a call whose tool raised Interrupt (its content is the question).
INTERRUPTED = "interrupted"
#: The reason a child run ends with instead of waiting for a human (no one would answer).
SUBAGENT_WAITING = "subagent_waiting"
#: What the model reads for a rejected call when the human gave no message.
DEFAULT_REJECTION = "error: a human rejected this call; do not retry it as it was"


class PendingApproval(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One call waiting for a human, as the API and ``engine.pending_approvals()`` show it.

    ``arguments`` is the call's JSON arguments as the model gave them; ``question`` the
    tool's question for an interrupt; ``until`` when the run fails without a decision.
    """

    run_id: str
    agent: str
    tenant: str
    call_id: str
    tool: str
    arguments: str
    kind: str
    step: int
    requested_at: float
    question: str | None = None
    until: float | None = None


def gate(
    planned: list[PlannedCall], approved: Container[int]
) -> tuple[list[PlannedCall], list[PlannedCall]]:
    """Split a step's calls into those that run now and those held for approval.

    ``approved`` holds the indices a human approved already (they run). A policy
    function that raises holds its call: when in doubt, ask.
    """
    run: list[PlannedCall] = []
    held: list[PlannedCall] = []
    for call in planned:
        check = call.tool.approval
        if check is None or call.index in approved:
            run.append(call)
            continue
        try:
            needs = bool(check(call.args, call.ctx))
        except Exception:
            needs = True
        (held if needs else run).append(call)
    return run, held


def requests_for(
    step: int,
    ts: float,
    message_calls: Sequence[Any],
    held: Sequence[PlannedCall],
    results: Sequence[tuple[int, ToolResult]],
) -> list[ApprovalRequested]:
    """The requests for a step's held calls and for its calls that raised Interrupt."""
    asks = [
        ApprovalRequested(
            step,
            ts,
            call.index,
            call.ctx.call_id,
            call.tool.name,
            message_calls[call.index].arguments,
        )
        for call in held
    ]
    for index, result in results:
        if result.error == INTERRUPTED:
            asks.append(
                ApprovalRequested(
                    step,
                    ts,
                    index,
                    result.call_id,
                    result.name,
                    message_calls[index].arguments,
                    "interrupt",
                    result.content,
                )
            )
    asks.sort(key=lambda a: a.index)
    return asks


def decided_result(decision: ApprovalDecided) -> ToolResult | None:
    """The call's result a decision fixes (None for ``approve``: the call runs)."""
    if decision.decision == "approve":
        return None
    if decision.decision == "answer":
        return ToolResult(decision.call_id, decision.tool, decision.message or "", attempts=0)
    return ToolResult(
        decision.call_id,
        decision.tool,
        decision.message or DEFAULT_REJECTION,
        ok=False,
        error="rejected",
        attempts=0,
    )


def child_cannot_wait(asks: Sequence[ApprovalRequested]) -> str:
    """The error of a child run that would have waited on ``asks``: a parent run cannot
    approve nor answer its child's calls, and no one else is asked."""
    what = ", ".join(
        f"{a.tool} ({a.call_id}) asks {a.question!r}" if a.kind == "interrupt"
        else f"{a.tool} ({a.call_id}) needs approval"
        for a in asks
    ) or "a call waits for a human"
    return (
        f"a sub-agent cannot wait for a human: {what}; its parent run cannot decide "
        "(give sub-agents tools that need no approval, or hand off instead)"
    )


def waiting_for(agent: Agent, record: RunRecord, now: float) -> Waiting:
    """How long a run parked now may wait: its deadline (if it counts) or the agent's
    ``approval_timeout_s``, whichever ends first."""
    until: float | None = None
    reason = "deadline"
    pause = agent.deadline_while_waiting == "pause"
    deadline = agent.deadline_s if record.deadline_s is None else record.deadline_s
    if not pause and deadline is not None and deadline != math.inf:
        until = (record.started_at or now) + deadline + record.paused_s
    if agent.approval_timeout_s is not None:
        timeout = now + agent.approval_timeout_s
        if until is None or timeout < until:
            until, reason = timeout, "approval_timeout"
    return Waiting(now, until, reason, pause)


def open_requests(
    entries: Sequence[JournalEntry],
) -> tuple[dict[str, ApprovalRequested], set[str]]:
    """The requests of the run's open step with no decision yet, by call id, and the call
    ids decided already in that step."""
    asks: dict[str, ApprovalRequested] = {}
    decided: set[str] = set()
    for entry in entries:
        if isinstance(entry, ModelTurn | StepCommitted | StepRecord):
            asks, decided = {}, set()
        elif isinstance(entry, ApprovalRequested):
            asks[entry.call_id] = entry
        elif isinstance(entry, ApprovalDecided):
            asks.pop(entry.call_id, None)
            decided.add(entry.call_id)
    return asks, decided


def pending_approvals(record: RunRecord, entries: Sequence[JournalEntry]) -> list[PendingApproval]:
    """The calls of a waiting run that wait for a decision, in call order."""
    if record.status != "waiting":
        return []
    asks, _ = open_requests(entries)
    until = record.waiting.until if record.waiting is not None else None
    return [
        PendingApproval(
            record.run_id,
            record.agent,
            record.tenant,
            a.call_id,
            a.tool,
            a.arguments,
            a.kind,
            a.step,
            a.ts,
            a.question,
            until,
        )
        for a in sorted(asks.values(), key=lambda a: a.index)
    ]


def check_decision(
    ask: ApprovalRequested,
    decision: str,
    arguments: str | None,
    tool: Tool[Any, Any] | None,
) -> None:
    """Refuse a decision that does not fit its request (a :class:`DecisionError`, 422)."""
    if decision not in ("approve", "reject", "answer"):
        raise DecisionError(
            422, "decision must be one of approve, reject, answer", field="decision"
        )
    if ask.kind == "interrupt" and decision == "approve":
        raise DecisionError(
            422,
            f"call {ask.call_id!r} asked a question ({ask.question!r}): answer or reject it",
            field="decision",
        )
    if ask.kind == "approval" and decision == "answer":
        raise DecisionError(
            422, f"call {ask.call_id!r} waits for approval: approve or reject it", field="decision"
        )
    if arguments is None:
        return
    if decision != "approve":
        raise DecisionError(422, "arguments are only for approve", field="arguments")
    if tool is None:
        raise DecisionError(
            422,
            f"cannot check arguments for tool {ask.tool!r}: it is not served here",
            field="arguments",
        )
    try:
        tool.decode_arguments(arguments)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        schema = msgspec.json.encode(tool.parameters).decode()
        raise DecisionError(
            422,
            f"invalid arguments for {tool.name!r}: {exc}; expected JSON matching {schema}",
            field="arguments",
        ) from None
