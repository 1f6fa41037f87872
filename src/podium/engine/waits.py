"""Waits on humans (see podium.engine.approvals): a step parked for approval, the
decisions that end the wait, the calls a resumed step runs after them; a child run,
whose parent cannot decide for it, fails instead of waiting; a waiting run asked to
run again ends if its wait is over.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from podium.agent import Agent
from podium.engine import approvals, decisions
from podium.engine.base import Finish, Waiting
from podium.engine.handoff import find_agent
from podium.engine.persist import Persistence
from podium.engine.records import ApprovalRequested, JournalEntry, ModelTurn, RunRecord, ToolOutcome
from podium.engine.replay import PendingStep, RunState
from podium.engine.step import PlannedCall
from podium.engine.stopwatch import Stopwatch
from podium.errors import DecisionError, RunNotFoundError, StaleRunError
from podium.messages import Message
from podium.models.base import ModelResponse
from podium.tools.executor import ToolResult
from podium.tools.tool import Tool


def _tool_of(agent: Agent, record: RunRecord, name: str) -> Tool[Any, Any] | None:
    """The tool ``name`` of the agent ``record``'s run stands with now: ``agent`` (the
    run's) or, after a hand-off, the one its hand-offs lead to (``record.active_agent``)."""
    current = find_agent(agent, record.active_agent)
    return None if current is None else current.tools.get(name)


class Waits(Persistence):

    async def pending_approvals(
        self, run_id: str | None = None, *, tenant: str | None = None, limit: int = 100
    ) -> list[approvals.PendingApproval]:
        """The tool calls waiting for a human: of one run, or of every waiting run."""
        if run_id is None:
            return await decisions.list_pending(self.store, tenant=tenant, limit=limit)
        record = await self.store.get(run_id)
        if record is None or (tenant is not None and record.tenant != tenant):
            raise RunNotFoundError(run_id)
        return await decisions.run_pending(self.store, record)

    async def decide(
        self,
        run_id: str,
        call_id: str,
        *,
        approve: bool | None = None,
        answer: str | None = None,
        message: str | None = None,
        arguments: Mapping[str, Any] | str | None = None,
        by: str | None = None,
        agent: Agent | None = None,
    ) -> RunRecord:
        """Decide on a waiting call: ``approve=True`` (with edited ``arguments``, checked
        against the tool's schema: pass ``agent``, the run's, whose hand-offs lead to the
        agent the run stands with now), ``approve=False`` with a ``message``
        the model reads, or ``answer=`` a tool's question. Journaled before it returns.

        When the returned record is ``queued`` every call of the step is decided: drive
        it on with :meth:`resume` (the gateway enqueues it for a worker). Raises
        :class:`~podium.errors.DecisionError` (404, 409, 422 as its ``status`` says).
        """
        if (approve is None) == (answer is None):
            raise DecisionError(422, "give approve=True/False or answer=..., one of them")
        kind = "answer" if answer is not None else "approve" if approve else "reject"
        raw = arguments if arguments is None or isinstance(arguments, str) else (
            msgspec.json.encode(arguments).decode()
        )
        if raw is not None and agent is None:
            raise DecisionError(422, "pass agent= to check edited arguments against its tool")
        tools = None if agent is None else (lambda run, name: _tool_of(agent, run, name))
        record, _ = await decisions.decide(
            self.store, run_id, call_id, kind,
            message=answer if answer is not None else message,
            arguments=raw, by=by, tools=tools,
        )
        return record

    async def sweep_waiting(self, *, now: float | None = None) -> list[RunRecord]:
        """End ``failed`` the waiting runs past their deadline or approval timeout (workers
        call this periodically; embedded users without one may too)."""
        ended = await decisions.sweep_waiting(self.store, now=now)
        for record, final in ended:
            for observer in self.observers:
                observer(record.run_id, final)
            if self.hook is not None:  # counted with the other ends (reason deadline, …)
                self.hook.run_finished(record)
        return [record for record, _ in ended]

    async def _still_waiting(self, record: RunRecord) -> RunRecord:
        """A waiting run asked to be driven: ended if its wait is over, else as it is.
        A child run found waiting (parked by a version that let children wait) ends
        ``failed``, ``subagent_waiting``: its parent, driving it now, cannot decide."""
        waiting = record.waiting
        reason = error = None
        if record.parent_run_id is not None:
            entries = [e for _, e in await self.store.journal(record.run_id)]
            asks, _ = approvals.open_requests(entries)
            reason = approvals.SUBAGENT_WAITING
            error = approvals.child_cannot_wait(sorted(asks.values(), key=lambda a: a.index))
        elif waiting is None or waiting.until is None or waiting.until > time.time():
            return record
        try:
            final = await decisions.expire(self.store, record, reason=reason, error=error)
        except StaleRunError:  # decided or cancelled meanwhile: as it stands now
            stored = await self.store.get(record.run_id)
            return stored if stored is not None else record
        for observer in self.observers:
            observer(record.run_id, final)
        if self.hook is not None:
            self.hook.run_finished(record)
        return record

    async def _park(
        self,
        agent: Agent,
        state: RunState,
        planned: list[PlannedCall],
        held: list[PlannedCall],
        rejected: list[tuple[int, ToolResult]],
        results: list[tuple[int, ToolResult]],
        done: dict[int, ToolResult],
        deferred: tuple[Message, ModelResponse] | None,
        sw: Stopwatch,
        ttft: int,
    ) -> None:
        """Journal the step so far and the calls that wait for a human, with the record
        ``waiting``, in one write; then end the drive (:class:`Waiting`). Returns if no
        call waits after all (another run's tool raised Interrupt meanwhile)."""
        step = state.step
        ts = time.time()
        message = deferred[0] if deferred is not None else state.ctx.messages[-1]
        asks = approvals.requests_for(step, ts, message.tool_calls, held, results)
        if not asks:
            return
        entries: list[JournalEntry] = []
        if deferred is not None:  # the lone call's turn rode with the commit: write it now
            profile = sw.snapshot(step, 0, ttft)  # so far, tools included: for the resume
            entries.append(ModelTurn(step, ts, message, deferred[1].usage, profile))
        entries.extend(ToolOutcome(step, ts, i, r) for i, r in rejected)
        if deferred is not None or (len(planned) == 1 and not done):  # not journaled by _run_tools
            entries.extend(ToolOutcome(step, ts, i, r) for i, r in results if i not in done)
        entries.extend(asks)
        await self._wait_for_humans(agent, state, entries)

    async def _wait_for_humans(
        self, agent: Agent, state: RunState, entries: Sequence[JournalEntry]
    ) -> None:
        record = state.record
        if record.parent_run_id is not None:  # a child run: its parent cannot decide
            asks = [e for e in entries if isinstance(e, ApprovalRequested)]
            done = [e for e in entries if not isinstance(e, ApprovalRequested)]
            if done:  # what the step did before it would have waited stays journaled
                await self._append(state, done)
            raise Finish("failed", approvals.SUBAGENT_WAITING, approvals.child_cannot_wait(asks))
        now = time.time()
        record.status = "waiting"
        record.waiting = approvals.waiting_for(agent, record, now)
        record.steps = state.step
        record.usage = state.usage
        if state.alarm is not None:
            state.alarm.disarm()
        await self._append(state, entries, record=record)
        raise Waiting

    async def _after_humans(
        self,
        agent: Agent,
        state: RunState,
        pending: PendingStep,
        planned: list[PlannedCall],
        rejected: list[tuple[int, ToolResult]],
    ) -> list[PlannedCall]:
        """The calls to run in a step resumed after humans decided: approved ones with
        their (edited) arguments; rejected and answered ones have their outcome already.
        A call still undecided (its request was never journaled: the worker died right
        after the tool asked) parks the run again."""
        decided = pending.decisions or {}
        requests = pending.requests or {}
        undecided = [
            ApprovalRequested(
                pending.step, time.time(), i, r.call_id, r.name,
                pending.message.tool_calls[i].arguments, "interrupt", r.content,
            )
            for i, r in sorted((pending.interrupted or {}).items())
            if i not in decided and i not in requests
        ]
        if undecided or any(i not in decided for i in requests):
            entries = [ToolOutcome(pending.step, time.time(), i, r) for i, r in rejected]
            state.step = pending.step
            await self._wait_for_humans(agent, state, [*entries, *undecided])
        approved: set[int] = set(pending.outcomes)  # ran, rejected or answered: not gated
        kept: list[PlannedCall] = []
        for call in planned:
            decision = decided.get(call.index)
            if decision is not None and decision.decision == "approve":
                approved.add(call.index)
                if decision.arguments is not None:
                    try:
                        call.args = call.tool.decode_arguments(decision.arguments)
                    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                        # Checked when decided; the tool changed since: the model hears why.
                        why = f"error: approved arguments no longer fit {call.tool.name!r}: {exc}"
                        rejected.append((call.index, ToolResult(
                            call.ctx.call_id, call.tool.name, why, ok=False,
                            error="invalid_arguments", attempts=0,
                        )))
                        continue
            kept.append(call)
        state.approved = frozenset(approved)
        return kept
