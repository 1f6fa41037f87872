"""What a run is made of on disk: its record and its append-only journal.

A checkpoint appends only what its step added (the model's turn, the tool
outcomes, a commit marker), never the whole state, so its cost stays the same
at step 200 as at step 1. Replaying the journal rebuilds the context exactly;
a step with a model turn but no commit is resumed by running only the tool
calls that have no outcome yet.
"""

from __future__ import annotations

import time
from typing import Generic, Literal, TypeVar

import msgspec

from podium.engine.profile import RunProfile, StepProfile
from podium.errors import RunError
from podium.messages import Message, Usage
from podium.output import OutT
from podium.security.verdict import Screened
from podium.tools.result import ToolResult

__all__ = (
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "ApprovalDecided",
    "ApprovalRequested",
    "Compacted",
    "HandedOff",
    "JournalEntry",
    "ModelTurn",
    "OutputRejected",
    "RunFinished",
    "RunRecord",
    "RunStatus",
    "Screened",
    "StepCommitted",
    "StepRecord",
    "ToolOutcome",
    "Waiting",
)

T = TypeVar("T")

RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
#: Every status, in a run's order: ``waiting`` is a run parked on a human (no worker holds it).
RUN_STATUSES: tuple[str, ...] = ("queued", "running", "waiting", "completed", "failed", "cancelled")
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class Waiting(msgspec.Struct, gc=False, omit_defaults=True):
    """Why and until when a ``waiting`` run waits (see :mod:`podium.engine.approvals`).

    ``until`` is the wall-clock time past which it fails without a decision (None:
    never), with ``reason`` ``deadline`` (its run deadline keeps counting) or
    ``approval_timeout``.
    """

    since: float
    until: float | None = None
    reason: str = "deadline"
    #: The run's deadline does not count this wait (``deadline_while_waiting="pause"``).
    pause: bool = False


class RunRecord(msgspec.Struct, Generic[OutT], gc=False, omit_defaults=True):
    """A run's header: who, what, where it stands and how it ended.

    ``reason`` is a stable code when the run did not complete: ``max_steps``,
    ``deadline``, ``model_error``, ``invalid_reply``, ``invalid_tool_calls``,
    ``invalid_output``, ``context_overflow`` (a prompt that no compaction could fit in
    ``max_context_tokens``), ``handoff_filter`` (a hand-off's input filter failed),
    ``cancelled``, ``worker_lost``, ``subagent_waiting`` (a child run
    that would have waited for a human: its parent cannot answer), ``invalid_tools`` (a
    gateway client's tools no longer fit the agent). ``version`` grows with every
    update, for optimistic concurrency in distributed stores.

    ``output`` is the final answer as text. For an agent with an ``output_type`` it is
    the answer's canonical JSON and ``structured`` is true; :meth:`output_as` gives the
    typed value, and ``agent.output_of(record)`` the value typed by the agent's own
    ``output_type`` (``Agent[OrderStatus]`` runs are ``RunRecord[OrderStatus]`` to type
    checkers; the parameter exists for them only)::

        record = await agent.run("Where is order A-1?")
        order = record.output_as(OrderStatus)  # or: agent.output_of(record)

    A sub-agent's run (see :meth:`Agent.as_tool <podium.agent.Agent.as_tool>`) names the
    run that called it in ``parent_run_id`` and the call in ``parent_call``
    (``"STEP:INDEX"``); ``active_agent`` names the agent driving the run after a
    hand-off (None: ``agent``, the one it started with).
    """

    run_id: str
    agent: str
    input: str
    status: RunStatus = "queued"
    tenant: str = "default"
    created_at: float = msgspec.field(default_factory=time.time)
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    output: str | None = None
    error: str | None = None
    reason: str | None = None
    steps: int = 0
    usage: Usage = Usage()
    profile: RunProfile | None = None
    version: int = 0
    pool: str = "default"
    metadata: dict[str, str] = {}
    deadline_s: float | None = None  # this run's own limit (None: its agent's)
    structured: bool = False  # output is the JSON of the agent's output_type
    parent_run_id: str | None = None
    parent_call: str | None = None
    active_agent: str | None = None
    #: Set while the run is ``waiting`` on a human; None otherwise.
    waiting: Waiting | None = None
    #: Seconds spent waiting that its deadline does not count (``deadline_while_waiting="pause"``).
    paused_s: float = 0.0
    #: The conversation the run belongs to: it starts from the thread's history.
    thread_id: str | None = None
    #: Times an embedded server took the run up again at its start after the process
    #: driving it stopped first (killed, out of memory, a tool that ended the process).
    #: Past the worker's ``max_deliveries`` the run is dead-lettered, not driven again:
    #: a run that kills its process would otherwise kill every server started after it.
    restarts: int = 0

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def output_as(self, output_type: type[T]) -> T:
        """The output as ``output_type`` (usually the agent's ``output_type``), validated.

        Raises :class:`RunError` if the run did not complete and
        :class:`~podium.errors.OutputValidationError` if the output does not match.
        ``str`` gives a text answer as it is.
        """
        self.raise_for_status()
        output = self.output or ""
        if output_type is str and not self.structured:
            return output  # type: ignore[return-value]  # T is str here
        from podium.output import decode_output

        return decode_output(output, output_type)

    def raise_for_status(self) -> RunRecord:
        """Return the record if the run completed, else raise :class:`RunError`."""
        if self.status != "completed":
            raise RunError(self.run_id, self.status, self.reason or self.status, self.error)
        return self


class ModelTurn(msgspec.Struct, tag="model", gc=False, omit_defaults=True):
    """The model's reply at ``step`` (persisted before any of its tool calls run).

    ``profile`` holds the step's timings so far (assemble, model, parse; the tools too for
    a turn journaled as the step parks on a human): a step resumed from here (after a
    decision, or on another worker) carries them on, so its committed profile has the
    model's time it did not spend again."""

    step: int
    ts: float
    message: Message
    usage: Usage = Usage()
    profile: StepProfile | None = None


class ToolOutcome(msgspec.Struct, tag="tool", gc=False, omit_defaults=True):
    """One tool call's result, already truncated to what the model will read."""

    step: int
    ts: float
    index: int
    result: ToolResult


class Compacted(msgspec.Struct, tag="compact", gc=False):
    """``messages[start:end]`` were replaced by ``summary``."""

    step: int
    ts: float
    start: int
    end: int
    summary: Message
    method: str = "extractive"


class HandedOff(msgspec.Struct, tag="handoff", gc=False, omit_defaults=True):
    """A hand-off with an input filter took effect before ``step``: the run goes on with
    ``agent`` and ``messages`` (the history after the system prompt, as the filter left
    it). Journaled so a resumed run has the same history without calling the filter again
    (a hand-off without a filter needs no entry: its step's outcome is its record)."""

    step: int
    ts: float
    agent: str
    messages: tuple[Message, ...]


class StepCommitted(msgspec.Struct, tag="step", gc=False, omit_defaults=True):
    """The step is complete (its turn and outcomes were journaled before)."""

    step: int
    ts: float
    profile: StepProfile | None = None


class StepRecord(msgspec.Struct, tag="steprec", gc=False, omit_defaults=True):
    """A whole step in one entry: the model's turn, its tool results (in call order), the
    profile. Used when nothing had to be durable before the step's end (no side effects,
    a single call), which is the common case: one write per step.

    ``profile`` holds the step's timings up to its checkpoint (the checkpoint's own
    time is known only after the write; the record stored at the run's end has it)."""

    step: int
    ts: float
    message: Message
    results: tuple[ToolResult, ...] = ()
    usage: Usage = Usage()
    profile: StepProfile | None = None


class OutputRejected(msgspec.Struct, tag="output_rejected", gc=False, omit_defaults=True):
    """A whole step whose reply was not a valid answer of the agent's ``output_type``: the
    model's turn, and the feedback it reads next (the error and the expected schema)."""

    step: int
    ts: float
    message: Message
    feedback: Message
    error: str = ""
    usage: Usage = Usage()
    profile: StepProfile | None = None
class ApprovalRequested(msgspec.Struct, tag="approval", gc=False, omit_defaults=True):
    """A tool call of ``step`` that waits for a human: an approval, or a tool's question.

    ``kind`` is ``approval`` (the tool requires approval; it has not run) or
    ``interrupt`` (the tool ran and asked ``question``; the human's answer becomes
    its result). ``arguments`` is the call's JSON arguments as the model gave them.
    """

    step: int
    ts: float
    index: int
    call_id: str
    tool: str
    arguments: str
    kind: Literal["approval", "interrupt"] = "approval"
    question: str | None = None


class ApprovalDecided(msgspec.Struct, tag="decision", gc=False, omit_defaults=True):
    """A human's decision on one :class:`ApprovalRequested` (journaled before the run resumes).

    ``decision``: ``approve`` (run the call, with ``arguments`` if edited), ``reject``
    (the model reads ``message`` as the call's result) or ``answer`` (an interrupt's
    reply, which becomes the call's result). ``by`` says who decided.
    """

    step: int
    ts: float
    index: int
    call_id: str
    tool: str
    decision: Literal["approve", "reject", "answer"]
    message: str | None = None
    arguments: str | None = None
    by: str | None = None


class RunFinished(msgspec.Struct, tag="final", gc=False, omit_defaults=True):
    ts: float
    status: RunStatus
    output: str | None = None
    error: str | None = None
    reason: str | None = None
    structured: bool = False  # output is the JSON of the agent's output_type


JournalEntry = (
    StepRecord
    | ModelTurn
    | ToolOutcome
    | Compacted
    | HandedOff
    | StepCommitted
    | RunFinished
    | Screened
    | OutputRejected
    | ApprovalRequested
    | ApprovalDecided
)
