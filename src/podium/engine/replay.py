"""Rebuild a run's in-memory state from its journal (sans-I/O)."""

from __future__ import annotations

import msgspec

from podium.agent import Agent
from podium.context.buffer import CompactionPlan, ContextBuffer
from podium.engine.profile import RunProfile
from podium.engine.records import (
    Compacted,
    JournalEntry,
    ModelTurn,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.engine.step import tool_message
from podium.messages import Message, Usage
from podium.tools.executor import ToolResult

__all__ = ("PendingStep", "RunState", "replay")


class PendingStep(msgspec.Struct, gc=False):
    """A step whose model turn is journaled but which was never committed."""

    step: int
    message: Message
    outcomes: dict[int, ToolResult]


class RunState:
    """What the driver holds for one run between steps."""

    __slots__ = (
        "attained_s",
        "ctx",
        "finished",
        "invalid_calls",
        "pending",
        "profile",
        "record",
        "step",
        "usage",
    )

    def __init__(self, record: RunRecord, ctx: ContextBuffer) -> None:
        self.record = record
        self.ctx = ctx
        self.step = 0
        self.invalid_calls = 0
        self.attained_s = 0.0
        self.usage = record.usage
        self.profile = RunProfile()
        self.pending: PendingStep | None = None
        self.finished: RunFinished | None = None


def replay(agent: Agent, record: RunRecord, entries: list[JournalEntry]) -> RunState:
    """The state after the journal's last entry: context, step counter, pending step."""
    state = RunState(record, ContextBuffer(agent.prefix, agent.context.tokenizer, record.input))
    usage = Usage()
    turn: ModelTurn | None = None
    outcomes: dict[int, ToolResult] = {}
    flushed = True

    def flush() -> None:
        nonlocal flushed
        if not flushed:
            for index in sorted(outcomes):
                state.ctx.append(tool_message(outcomes[index]))
                if outcomes[index].error in ("unknown_tool", "invalid_arguments"):
                    state.invalid_calls += 1
            flushed = True

    for entry in entries:
        if isinstance(entry, StepRecord):
            usage = usage + entry.usage
            state.ctx.append(entry.message)
            for result in entry.results:
                state.ctx.append(tool_message(result))
                if result.error in ("unknown_tool", "invalid_arguments"):
                    state.invalid_calls += 1
            state.step = entry.step + 1
            if entry.profile is not None:
                state.profile.steps.append(entry.profile)
        elif isinstance(entry, ModelTurn):
            turn, outcomes, flushed = entry, {}, False
            usage = usage + entry.usage
            state.ctx.append(entry.message)
        elif isinstance(entry, ToolOutcome):
            outcomes[entry.index] = entry.result
        elif isinstance(entry, Compacted):
            flush()
            state.ctx.replace(CompactionPlan(entry.start, entry.end), entry.summary)
        elif isinstance(entry, StepCommitted):
            flush()
            turn = None
            state.step = entry.step + 1
            if entry.profile is not None:
                state.profile.steps.append(entry.profile)
        elif isinstance(entry, RunFinished):
            state.finished = entry
    state.usage = usage
    if turn is not None:
        state.pending = PendingStep(turn.step, turn.message, outcomes)
        state.step = turn.step
    return state
