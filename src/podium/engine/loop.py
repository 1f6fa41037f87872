"""The step loop: the hot path of the whole runtime, one function, each step inline.
"""

from __future__ import annotations

import asyncio
import math
import time

from podium.agent import Agent
from podium.engine.records import RunStatus
from podium.engine.replay import RunState
from podium.engine.steps import Steps
from podium.tools.deadlines import arm_deadline


class StepLoop(Steps):

    def _arm_deadline(self, agent: Agent, state: RunState) -> float | None:
        """Arm the run's wall-clock limit on its task (``state.alarm``); returns the limit."""
        record = state.record
        deadline = agent.deadline_s if record.deadline_s is None else record.deadline_s
        if deadline is not None and deadline != math.inf and state.task is not None:
            assert record.started_at is not None
            left = record.started_at + record.paused_s + deadline - time.time()
            # A fresh run arms its deadline as the same float as every other (one wheel queue).
            fresh = 0.0 <= deadline - left < min(1.0, deadline / 10)
            state.alarm = arm_deadline(state.task, deadline if fresh else max(0.0, left))
        return deadline

    def _cancelled(
        self, state: RunState, deadline: float | None
    ) -> tuple[RunStatus, str | None, str | None]:
        """How a cancelled step loop ends: cancelled, or failed at its deadline. Re-raises
        the cancellation when it is neither (a shutdown: the run resumes elsewhere)."""
        cancelled = state.record.run_id in self._cancelling
        expired = state.alarm is not None and state.alarm.fired
        task = state.task
        if not (cancelled or expired) or task is None:
            raise asyncio.CancelledError
        for _ in range(cancelled + expired):
            task.uncancel()
        if cancelled:
            return ("cancelled", "cancelled", "cancelled")
        return ("failed", "deadline", f"deadline of {deadline}s passed")
