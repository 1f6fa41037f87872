"""The engine: run records and journal, sans-I/O step logic, the async driver, the profile."""

from podium.engine.children import ChildRunError, child_run_id, child_runs
from podium.engine.driver import Engine, Observer, new_run_id
from podium.engine.profile import (
    PHASES,
    STEP_PHASES,
    PhaseSummary,
    ProfileAggregator,
    ProfileSummary,
    RunProfile,
    StepProfile,
)
from podium.engine.records import (
    Compacted,
    HandedOff,
    JournalEntry,
    ModelTurn,
    RunFinished,
    RunRecord,
    RunStatus,
    StepCommitted,
    ToolOutcome,
)

__all__ = (
    "PHASES",
    "STEP_PHASES",
    "ChildRunError",
    "Compacted",
    "Engine",
    "HandedOff",
    "JournalEntry",
    "ModelTurn",
    "Observer",
    "PhaseSummary",
    "ProfileAggregator",
    "ProfileSummary",
    "RunFinished",
    "RunProfile",
    "RunRecord",
    "RunStatus",
    "StepCommitted",
    "StepProfile",
    "ToolOutcome",
    "child_run_id",
    "child_runs",
    "new_run_id",
)
