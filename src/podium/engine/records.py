"""What a run is made of on disk: its record and its append-only journal.

A checkpoint appends only what its step added (the model's turn, the tool
outcomes, a commit marker), never the whole state, so its cost stays the same
at step 200 as at step 1. Replaying the journal rebuilds the context exactly;
a step with a model turn but no commit is resumed by running only the tool
calls that have no outcome yet.
"""

from __future__ import annotations

import time
from typing import Literal

import msgspec

from podium.engine.profile import RunProfile, StepProfile
from podium.errors import RunError
from podium.messages import Message, Usage
from podium.security.screen import Screened
from podium.tools.executor import ToolResult

__all__ = (
    "TERMINAL_STATUSES",
    "Compacted",
    "JournalEntry",
    "ModelTurn",
    "RunFinished",
    "RunRecord",
    "RunStatus",
    "Screened",
    "StepCommitted",
    "StepRecord",
    "ToolOutcome",
)

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class RunRecord(msgspec.Struct, gc=False, omit_defaults=True):
    """A run's header: who, what, where it stands and how it ended.

    ``reason`` is a stable code when the run did not complete: ``max_steps``,
    ``deadline``, ``model_error``, ``invalid_reply``, ``invalid_tool_calls``,
    ``cancelled``, ``worker_lost``. ``version`` grows with every update, for
    optimistic concurrency in distributed stores.
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
    #: The conversation the run belongs to: it starts from the thread's history.
    thread_id: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def raise_for_status(self) -> RunRecord:
        """Return the record if the run completed, else raise :class:`RunError`."""
        if self.status != "completed":
            raise RunError(self.run_id, self.status, self.reason or self.status, self.error)
        return self


class ModelTurn(msgspec.Struct, tag="model", gc=False, omit_defaults=True):
    """The model's reply at ``step`` (persisted before any of its tool calls run)."""

    step: int
    ts: float
    message: Message
    usage: Usage = Usage()


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


class RunFinished(msgspec.Struct, tag="final", gc=False, omit_defaults=True):
    ts: float
    status: RunStatus
    output: str | None = None
    error: str | None = None
    reason: str | None = None


JournalEntry = (
    StepRecord | ModelTurn | ToolOutcome | Compacted | StepCommitted | RunFinished | Screened
)
