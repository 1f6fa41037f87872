"""Rebuild a run's in-memory state from its journal (sans-I/O)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

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


class Disarmable(Protocol):
    fired: bool

    def disarm(self) -> None: ...


class PendingStep(msgspec.Struct, gc=False):
    """A step whose model turn is journaled but which was never committed."""

    step: int
    message: Message
    outcomes: dict[int, ToolResult]


class RunState:
    """What the driver holds for one run between steps."""

    __slots__ = (
        "alarm",
        "allowed_tools",
        "attained_s",
        "blocked",
        "cached_tokens",
        "ctx",
        "finished",
        "general",
        "input_tokens",
        "invalid_calls",
        "output_tokens",
        "pending",
        "profile",
        "record",
        "redact",
        "requests",
        "step",
        "task",
    )

    def __init__(self, record: RunRecord, ctx: ContextBuffer) -> None:
        self.record = record
        self.ctx = ctx
        self.alarm: Disarmable | None = None  # the run's deadline, while armed
        #: Why the run must fail before its first step (its input was blocked), or None.
        self.blocked: str | None = None
        #: The tools this run's tenant may call (None: every tool of the agent).
        self.allowed_tools: frozenset[str] | None = None
        #: Replaces secrets in journal entries before they are written (None: no secrets).
        self.redact: Callable[[Sequence[JournalEntry]], Sequence[JournalEntry]] | None = None
        self.step = 0
        self.invalid_calls = 0
        self.attained_s = 0.0
        self.input_tokens = self.output_tokens = self.cached_tokens = self.requests = 0
        self.profile = RunProfile()
        self.pending: PendingStep | None = None
        self.finished: RunFinished | None = None
        #: The task driving the run (passed to calls that need it: finding it costs a
        #: system call on 3.11).
        self.task: asyncio.Task[Any] | None = None
        #: True when every step must take the general path (screening, a tenant allow-list).
        self.general = False

    def add_usage(self, usage: Usage) -> None:
        """Count a model call's tokens (plain ints: no object per step)."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.requests += usage.requests

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.output_tokens, self.cached_tokens, self.requests)


def replay(agent: Agent, record: RunRecord, entries: list[JournalEntry]) -> RunState:
    """The state after the journal's last entry: context, step counter, pending step."""
    state = RunState(record, ContextBuffer(agent.prefix, agent.context.tokenizer, record.input))
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
            state.add_usage(entry.usage)
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
            state.add_usage(entry.usage)
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
    if turn is not None:
        state.pending = PendingStep(turn.step, turn.message, outcomes)
        state.step = turn.step
    return state
