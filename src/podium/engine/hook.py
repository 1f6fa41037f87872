"""What the engine tells an observer (metrics, tracing) about each step and run.

One optional object, called at most twice per step boundary; ``None`` costs one
attribute test per step. Hooks must be cheap and never raise: they run on the
hot path, after the step's checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.messages import Usage
    from podium.tools.executor import ToolResult

__all__ = ("EngineHook", "combine")


class EngineHook(Protocol):
    def run_started(self, agent: Agent, record: RunRecord) -> None:
        """The run starts (or resumes) driving, in its own task: what a hook sets in a
        context variable here is seen by the run's model and tool calls."""

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: Usage,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        """A step was checkpointed. ``usage`` is the run's total so far; ``profile`` holds the
        step's phases (the last phase, checkpoint, just ended: now)."""

    def run_finished(self, record: RunRecord) -> None:
        """The run reached a terminal status (``record`` carries it)."""


class _Fanout:
    """Several hooks called in turn."""

    def __init__(self, hooks: Sequence[EngineHook]) -> None:
        self.hooks = tuple(hooks)

    def run_started(self, agent: Agent, record: RunRecord) -> None:
        for hook in self.hooks:
            hook.run_started(agent, record)

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: Usage,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        for hook in self.hooks:
            hook.step(agent, record, profile, usage, results)

    def run_finished(self, record: RunRecord) -> None:
        for hook in self.hooks:
            hook.run_finished(record)


def combine(*hooks: EngineHook | None) -> EngineHook | None:
    """One hook calling each of ``hooks`` that is not None (None if none is)."""
    present = [h for h in hooks if h is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else _Fanout(present)
