"""What the engine tells an observer (metrics, tracing) about each step and run.

One optional object. When a run starts (or resumes) driving, the engine asks it what
to call at each of that drive's steps: a function, or None for nothing, so a run the
observer does not follow (a trace not sampled) costs it nothing per step. With no
hook the engine tests one attribute per run and one per step. Hooks must be cheap and
never raise: they run on the hot path, after the step's checkpoint. Several hooks
(:func:`combine`) are asked in turn, and what they answer for a run is called by one
function made for their number, not by a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.tools.executor import ToolResult

__all__ = ("EngineHook", "StepHook", "TokenCounts", "combine")


class TokenCounts(Protocol):
    """A run's token totals so far. The engine passes its live run state (no object built
    per step), so read the figures during the call: they go on counting after it."""

    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


#: Called when a step was checkpointed: ``(agent, record, profile, usage, results)``.
#: ``usage`` is the run's total so far; ``profile`` holds the step's phases (the last
#: phase, checkpoint, just ended: now); ``results`` the step's tool outcomes by call index.
StepHook = Callable[
    ["Agent", "RunRecord", "StepProfile", TokenCounts, Sequence[tuple[int, "ToolResult"]]], None
]


class EngineHook(Protocol):
    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        """The run starts (or resumes) driving, in its own task: what a hook sets in a
        context variable here is seen by the run's model and tool calls. Returns what to
        call at each step of this drive (None: nothing)."""

    def run_finished(self, record: RunRecord) -> None:
        """The run reached a terminal status (``record`` carries it)."""


class _Fanout:
    """Several hooks asked in turn."""

    def __init__(self, hooks: Sequence[EngineHook]) -> None:
        self.hooks = tuple(hooks)

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        calls = [c for c in [h.run_started(agent, record) for h in self.hooks] if c is not None]
        if not calls:
            return None
        return calls[0] if len(calls) == 1 else _fan(calls)

    def run_finished(self, record: RunRecord) -> None:
        for hook in self.hooks:
            hook.run_finished(record)


class _Pair(_Fanout):
    """Two hooks (metrics and tracing, the usual pair), asked without a loop."""

    def __init__(self, hooks: Sequence[EngineHook]) -> None:
        super().__init__(hooks)
        self.first, self.second = hooks

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        first = self.first.run_started(agent, record)
        second = self.second.run_started(agent, record)
        if first is None:  # often one of them: metrics, and a trace not sampled
            return second
        return first if second is None else _fan([first, second])

    def run_finished(self, record: RunRecord) -> None:
        self.first.run_finished(record)
        self.second.run_finished(record)


def _fan(calls: list[StepHook]) -> StepHook:
    if len(calls) == 2:
        a, b = calls

        def two(agent: Agent, record: RunRecord, profile: StepProfile, usage: TokenCounts,
                results: Sequence[tuple[int, ToolResult]]) -> None:
            a(agent, record, profile, usage, results)
            b(agent, record, profile, usage, results)

        return two

    def many(agent: Agent, record: RunRecord, profile: StepProfile, usage: TokenCounts,
             results: Sequence[tuple[int, ToolResult]]) -> None:
        for call in calls:
            call(agent, record, profile, usage, results)

    return many


def combine(*hooks: EngineHook | None) -> EngineHook | None:
    """One hook asking each of ``hooks`` that is not None (None if none is)."""
    present = [h for h in hooks if h is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return _Pair(present) if len(present) == 2 else _Fanout(present)
