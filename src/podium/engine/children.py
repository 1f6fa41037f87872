"""Child runs: an agent called as a tool (:class:`~podium.tools.agent_tool.AgentTool`).

The parent's tool call creates the child run and awaits it in the same worker, as a
task of its own on the same loop (the parent's coroutine waits; it holds no thread).
The child is a run like any other: its own record (linked by ``parent_run_id`` and
``parent_call``), journal, profile and deadline (never later than its parent's).

Durability comes from the child's id, derived from the call: ``<parent>.<step>.<index>``.
The parent's reply is journaled before the child starts (agent tools have side
effects), so a parent resumed after its worker died makes the same call again and
finds the same child: finished, its answer is reused; unfinished, it is resumed from
its own journal (its finished tool calls are not repeated). Nothing else knows about
children, so no queue, worker or store had to change: the child rides on its parent's
lease.

Cancelling the parent (or its deadline passing) cancels its children; a shutdown
(drain, lost lease, process exit) leaves them ``running``, to be resumed with it.

None of this is paid by agents without agent tools or hand-offs: the engine calls
:func:`attach` once per run, only for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from podium.engine.handoff import restore
from podium.engine.records import JournalEntry, ModelTurn, RunRecord, StepRecord
from podium.errors import StoreError
from podium.observe.tracing import TRACE_KEYS, child_trace_context
from podium.security.redact import scrub_input
from podium.store.base import JournalItem, RunStore
from podium.tools.tool import ToolContext

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.hook import EngineHook
    from podium.engine.replay import RunState

__all__ = ("ChildRunError", "RunLinks", "attach", "child_run_id", "child_runs", "run_child")

#: The links of the run this task drives (set by :func:`attach`, for its agent tools).
_LINKS: contextvars.ContextVar[RunLinks | None] = contextvars.ContextVar(
    "podium_run_links", default=None
)


class Driver(Protocol):
    """What a run's agent tools need of the engine driving it (an ``Engine``, described
    here rather than imported: the engine's modules import this one)."""

    store: RunStore
    hook: EngineHook | None

    def execute(
        self, agent: Agent, record: RunRecord, *, admit_ns: int = 0
    ) -> Coroutine[Any, Any, RunRecord]: ...

    def cancel(self, run_id: str) -> bool: ...

    def cancelling(self, run_id: str) -> bool: ...

    async def cancel_stored(self, record: RunRecord) -> bool: ...


class ChildRunError(Exception):
    """A child run ended without an answer; its parent's model reads this as the tool's
    error observation (never a crash of the parent)."""


def child_run_id(parent_run_id: str, step: int, index: int) -> str:
    """The id of the child run that call ``index`` of ``step`` of a run starts."""
    return f"{parent_run_id}.{step}.{index}"


class RunLinks:
    """What a run with agent tools holds for them: its engine, its state, and the limit on
    its children running at once (``Agent.max_parallel_children``)."""

    __slots__ = ("deadline_at", "engine", "slots", "state")

    def __init__(self, engine: Driver, agent: Agent, state: RunState) -> None:
        self.engine = engine
        self.state = state
        self.slots = asyncio.Semaphore(agent.max_parallel_children)
        record = state.record
        deadline = agent.deadline_s if record.deadline_s is None else record.deadline_s
        started = record.started_at or time.time()
        self.deadline_at = math.inf if deadline is None else started + deadline

    def _stopping(self) -> bool:
        """Whether the parent is being cancelled or ran past its deadline (its children
        end too), rather than shut down (they stay ``running`` and resume with it)."""
        alarm = self.state.alarm
        return self.engine.cancelling(self.state.record.run_id) or (
            alarm is not None and alarm.fired
        )

    async def run(self, agent: Agent, user_input: str, ctx: ToolContext) -> str:
        parent = self.state.record
        child_id = child_run_id(parent.run_id, ctx.step, ctx.call_index)
        store = self.engine.store
        async with self.slots:
            record = await store.get(child_id)
            if record is None:
                record = self._new_child(agent, child_id, user_input, ctx)
                try:
                    await store.create(record)
                except StoreError:  # created meanwhile (a create retried after a lost reply)
                    found = await store.get(child_id)
                    if found is None:
                        raise
                    record = found
            if not record.done:
                record = await self._drive(agent, record)
        if record.status == "completed":
            return record.output or ""
        why = f"{record.reason}: {record.error}" if record.error else record.reason or "?"
        raise ChildRunError(f"sub-agent {agent.name!r} run {child_id} {record.status} ({why})")

    def _new_child(self, agent: Agent, child_id: str, text: str, ctx: ToolContext) -> RunRecord:
        parent = self.state.record
        metadata = {k: v for k, v in parent.metadata.items() if k not in TRACE_KEYS}
        hook = self.engine.hook
        if hook is not None:  # traced: the child's run span goes under this call's span
            metadata.update(child_trace_context(hook, parent, ctx, agent.name))
        own = agent.deadline_s if agent.deadline_s is not None else math.inf
        left = max(0.001, self.deadline_at - time.time())
        return RunRecord(
            child_id,
            agent.name,
            scrub_input(agent, text),
            tenant=parent.tenant,
            pool=parent.pool,
            metadata=metadata,
            deadline_s=left if left < own else None,
            parent_run_id=parent.run_id,
            parent_call=f"{ctx.step}:{ctx.call_index}",
        )

    async def _drive(self, agent: Agent, record: RunRecord) -> RunRecord:
        engine = self.engine
        task = asyncio.create_task(engine.execute(agent, record), name=f"run:{record.run_id}")
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            stopping = self._stopping()
            if not (stopping and engine.cancel(record.run_id)):
                task.cancel()  # shutdown: it stays `running` and resumes with its parent
            await asyncio.wait([task])
            if stopping:  # cancelled before its driver started: end it in the store
                with contextlib.suppress(StoreError, OSError):
                    stored = await engine.store.get(record.run_id)
                    if stored is not None and not stored.done:
                        await engine.cancel_stored(stored)
            raise


def attach(engine: Driver, agent: Agent, state: RunState, entries: Sequence[JournalEntry]) -> None:
    """Set up a run whose agent has agent tools or hand-offs, once, at its load: the
    agent a hand-off left it with, and the links its agent tools find."""
    restore(agent, state, entries)
    _LINKS.set(RunLinks(engine, agent, state))


async def run_child(agent: Agent, user_input: str, ctx: ToolContext) -> str:
    """Run (or resume, or reuse the answer of) the child run of call ``ctx``."""
    links = _LINKS.get()
    if links is None or links.state.record.run_id != ctx.run_id:
        raise RuntimeError(
            f"sub-agent {agent.name!r} can only be called by an agent's run on an Engine"
        )
    return await links.run(agent, user_input, ctx)


async def child_runs(
    store: RunStore, record: RunRecord, journal: Sequence[JournalItem] | None = None
) -> list[RunRecord]:
    """The child runs ``record``'s run started, in call order (read from its journal: the
    calls it made name their children's ids). ``journal``: the run's, read already."""
    if journal is None:
        journal = await store.journal(record.run_id)
    ids: dict[str, None] = {}
    for _, entry in journal:
        if isinstance(entry, StepRecord | ModelTurn):
            for index in range(len(entry.message.tool_calls)):
                ids[child_run_id(record.run_id, entry.step, index)] = None
    found = await asyncio.gather(*(store.get(child_id) for child_id in ids))
    return [r for r in found if r is not None and r.parent_run_id == record.run_id]
