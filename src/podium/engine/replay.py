"""Rebuild a run's in-memory state from its journal (sans-I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from podium.agent import Agent
from podium.context.buffer import CompactionPlan, ContextBuffer
from podium.engine.approvals import INTERRUPTED, decided_result
from podium.engine.profile import RunProfile, StepProfile
from podium.engine.records import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    HandedOff,
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.engine.step import tool_message
from podium.messages import Message, Usage
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    from podium.security.redact import RunRedactor

__all__ = ("PendingStep", "RunState", "replay")


_NONE: frozenset[int] = frozenset()


class Disarmable(Protocol):
    fired: bool

    def disarm(self) -> None: ...


class PendingStep(msgspec.Struct, gc=False):
    """A step whose model turn is journaled but which was never committed.

    ``requests``/``decisions``/``interrupted`` are by call index, for a step that
    waited on a human (see :mod:`podium.engine.approvals`): the calls asked about, the
    decisions taken, and the calls whose tool raised Interrupt.
    """

    step: int
    message: Message
    outcomes: dict[int, ToolResult]
    requests: dict[int, ApprovalRequested] | None = None
    decisions: dict[int, ApprovalDecided] | None = None
    interrupted: dict[int, ToolResult] | None = None
    #: The step's timings as its model turn was journaled: carried into its commit.
    profile: StepProfile | None = None


# gc=False: a run waiting in a tool should hold few objects the collector scans. Its one
# cycle (task → frame → state → task) ends with the drive, which drops the state.
class RunState(msgspec.Struct, gc=False):
    """What the driver holds for one run between steps."""

    record: RunRecord
    ctx: ContextBuffer
    alarm: Any = None  # Disarmable | None: the run's deadline, while armed
    #: The agent a hand-off passed the run to (None: the one it started with).
    agent: Any = None
    #: Why the run must fail before its first step (its input was blocked), or None.
    blocked: str | None = None
    #: The tools this run's tenant may call (None: every tool of the agent).
    allowed_tools: frozenset[str] | None = None
    #: Replaces secrets in journal entries before they are written (None: no secrets).
    redact: RunRedactor | None = None
    #: Calls of the step being resumed that a human approved (the gate lets them run).
    approved: frozenset[int] = _NONE
    step: int = 0
    invalid_calls: int = 0
    #: Replies that failed the agent's output type (its ``output_retries`` budget).
    output_failures: int = 0
    #: The run's model calls' tokens so far: input, output, cached, requests. One tuple,
    #: not four fields: a msgspec struct's attribute writes take Python's generic (slow)
    #: path, one a step instead of four (a list's item writes would be faster, but a list
    #: is one more object per run the collector scans; a tuple of ints it soon untracks).
    tally: tuple[int, int, int, int] = (0, 0, 0, 0)
    profile: RunProfile = msgspec.field(default_factory=RunProfile)
    pending: PendingStep | None = None
    finished: RunFinished | None = None
    #: The task driving the run (passed to calls that need it: finding it costs a
    #: system call on 3.11).
    task: Any = None
    #: True when every step must take the general path (screening, a tenant allow-list).
    general: bool = False
    #: Texts the screen flagged in this run (its input, tool results) that the model read:
    #: a later tool call quoting one is tainted (see podium.security.output_guard).
    flagged: list[str] | None = None
    #: What the engine's hook hears at each step of this drive (see podium.engine.hook):
    #: None when it asked for nothing (no hook; an untraced run of a tracing-only hook).
    on_step: Any = None

    def add_usage(self, usage: Usage) -> None:
        """Count a model call's tokens (read at once: a custom model's malformed usage
        fails the step that returned it)."""
        i, o, c, r = self.tally
        self.tally = (
            i + usage.input_tokens, o + usage.output_tokens, c + usage.cached_tokens,
            r + usage.requests,
        )

    # The run's totals so far, as a hook reads them (see podium.engine.hook.TokenCounts).
    @property
    def input_tokens(self) -> int:
        return self.tally[0]

    @property
    def output_tokens(self) -> int:
        return self.tally[1]

    @property
    def cached_tokens(self) -> int:
        return self.tally[2]

    @property
    def requests(self) -> int:
        return self.tally[3]

    @property
    def usage(self) -> Usage:
        tally = self.tally
        return Usage(tally[0], tally[1], tally[2], tally[3])


def replay(
    agent: Agent,
    record: RunRecord,
    entries: list[JournalEntry],
    history: Sequence[Message] | None = None,
) -> RunState:
    """The state after the journal's last entry: context, step counter, pending step.

    ``history``: the thread's turns the run started from (None: not on a thread).
    """
    ctx = ContextBuffer.start(agent.prefix, agent.context.tokenizer, record.input, history)
    state = RunState(record, ctx)
    if not entries:  # a fresh run (the usual case): nothing to replay
        return state
    turn: ModelTurn | None = None
    outcomes: dict[int, ToolResult] = {}
    # Calls of the open step that waited on a human (rare: created on first use).
    requests: dict[int, ApprovalRequested] | None = None
    decisions: dict[int, ApprovalDecided] | None = None
    interrupted: dict[int, ToolResult] | None = None
    flushed = True

    def flush() -> None:
        nonlocal flushed
        if not flushed:
            for index in sorted(outcomes):
                state.ctx.append(tool_message(outcomes[index]))
                if outcomes[index].error in ("unknown_tool", "invalid_arguments"):
                    state.invalid_calls += 1
                elif outcomes[index].error == "invalid_output":
                    state.output_failures += 1
            flushed = True

    for entry in entries:
        if isinstance(entry, StepRecord):
            state.add_usage(entry.usage)
            state.ctx.append(entry.message)
            for result in entry.results:
                state.ctx.append(tool_message(result))
                if result.error in ("unknown_tool", "invalid_arguments"):
                    state.invalid_calls += 1
                elif result.error == "invalid_output":
                    state.output_failures += 1
            state.step = entry.step + 1
            if entry.profile is not None:
                state.profile.steps.append(entry.profile)
        elif isinstance(entry, OutputRejected):
            state.add_usage(entry.usage)
            state.ctx.append(entry.message)
            state.ctx.append(entry.feedback)
            state.output_failures += 1
            state.step = entry.step + 1
            if entry.profile is not None:
                state.profile.steps.append(entry.profile)
        elif isinstance(entry, ModelTurn):
            turn, outcomes, flushed = entry, {}, False
            requests = decisions = interrupted = None
            state.add_usage(entry.usage)
            state.ctx.append(entry.message)
        elif isinstance(entry, ToolOutcome):
            if entry.result.error == INTERRUPTED:  # a question, not an outcome: it waits
                interrupted = interrupted or {}
                interrupted[entry.index] = entry.result
            else:
                outcomes[entry.index] = entry.result
        elif isinstance(entry, ApprovalRequested):
            requests = requests or {}
            requests[entry.index] = entry
        elif isinstance(entry, ApprovalDecided):
            decisions = decisions or {}
            decisions[entry.index] = entry
            fixed = decided_result(entry)
            if fixed is not None:  # rejected or answered: that is the call's outcome
                outcomes[entry.index] = fixed
        elif isinstance(entry, Compacted):
            flush()
            state.ctx.replace(CompactionPlan(entry.start, entry.end), entry.summary)
        elif isinstance(entry, HandedOff):  # (its agent is switched to by handoff.restore)
            flush()
            first = entry.messages[0] if entry.messages else None
            starts = first is not None and first.role == "user" and first.content == record.input
            state.ctx.restart(entry.messages, starts)
        elif isinstance(entry, StepCommitted):
            flush()
            turn = None
            state.step = entry.step + 1
            if entry.profile is not None:
                state.profile.steps.append(entry.profile)
        elif isinstance(entry, RunFinished):
            state.finished = entry
    if turn is not None:
        state.pending = PendingStep(
            turn.step, turn.message, outcomes, requests, decisions, interrupted, turn.profile
        )
        state.step = turn.step
    return state
