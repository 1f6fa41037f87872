"""A run's lifecycle: created (stored ``queued``, or ``running`` when it starts at
once), driven (:meth:`RunLifecycle._start` loads its state from its journal and marks it
``running`` for the step loop, :meth:`RunLifecycle._end_drive` writes its end), resumed,
cancelled (in its driver, or in the store when none holds it), paused for a drain.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from contextvars import Token
from typing import Any

from podium.agent import Agent, positive_seconds
from podium.engine.base import End, blocked
from podium.engine.children import attach
from podium.engine.handoff import adopt
from podium.engine.records import JournalEntry, RunRecord
from podium.engine.replay import RunState, replay
from podium.engine.runids import new_run_id
from podium.engine.steps import Steps
from podium.errors import ConfigError, RunNotFoundError
from podium.output import OutT
from podium.security.allowlist import allowed_tools
from podium.security.egress import EgressPolicy
from podium.security.output_guard import remember_flagged
from podium.security.redact import redactor_for, scrub_input
from podium.security.tenant_egress import EGRESS_KEY, enter_egress, leave_egress, with_egress
from podium.tools.client import CLIENT_TOOLS_KEY, with_client_tools

#: How many runs ended by :meth:`RunLifecycle.cancel_stored` are remembered for their drivers.
_ENDED_OUTSIDE_KEPT = 4096

def _check_run(
    agent: object, user_input: object, run_id: object, tenant: object, deadline_s: object
) -> None:
    """Refuse a run's arguments before anything is stored (a run that never starts)."""
    if not isinstance(agent, Agent):
        raise ConfigError(f"engine.run(agent, user_input): {agent!r} is not an Agent")
    if not isinstance(user_input, str):
        raise ConfigError(
            f"a run's input is the user's message as a string, not {type(user_input).__name__} "
            "(a conversation goes on with thread_id=...)"
        )
    if run_id is not None and not isinstance(run_id, str):
        raise ConfigError(f"run_id must be a string (or None for a new one), not {run_id!r}")
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(f"tenant must be a non-empty string, not {tenant!r}")
    if deadline_s is not None and not positive_seconds(deadline_s):
        raise ConfigError(
            f"deadline_s must be positive seconds (math.inf: none; None: the agent's), "
            f"not {deadline_s!r}"
        )


class RunLifecycle(Steps):

    async def create(
        self,
        agent: Agent,
        user_input: str,
        *,
        run_id: str | None = None,
        tenant: str = "default",
        metadata: dict[str, str] | None = None,
        deadline_s: float | None = None,
        thread_id: str | None = None,
        egress: EgressPolicy | None = None,
    ) -> RunRecord:
        """Store a new ``queued`` run without starting it.

        ``deadline_s`` overrides the agent's deadline for this run (``math.inf``: none).
        ``thread_id``: the run continues that conversation (created for ``tenant`` if
        new); it starts when the thread's earlier runs have ended, from their history.
        ``egress`` narrows where its tools may connect (the tenant's policy).
        """
        return await self._create(
            agent, user_input, run_id, tenant, metadata, deadline_s, thread_id, egress
        )

    async def _create(
        self,
        agent: Agent,
        user_input: str,
        run_id: str | None = None,
        tenant: str = "default",
        metadata: dict[str, str] | None = None,
        deadline_s: float | None = None,
        thread_id: str | None = None,
        egress: EgressPolicy | None = None,
        *,
        running: bool = False,
    ) -> RunRecord:
        """:meth:`create`; ``running``: the run starts now (:meth:`run`), so unless it
        waits for its thread's turn it is stored ``running`` at once (one write, not two)."""
        _check_run(agent, user_input, run_id, tenant, deadline_s)
        now = time.time()
        # Started at once unless it waits for its thread's turn: made so (a msgspec
        # struct's attribute writes are slow ones).
        started = running and thread_id is None
        record = RunRecord(
            run_id or new_run_id(),
            agent.name,
            scrub_input(agent, user_input),  # (stored, streamed and read without secrets)
            status="running" if started else "queued",
            tenant=tenant,
            metadata=with_egress(metadata or {}, egress),
            created_at=now,
            started_at=now if started else None,
            deadline_s=deadline_s,
            thread_id=thread_id,
        )
        if thread_id is None:
            await self.store.create(record)
        else:
            await self.threads.create_run(record, create_thread=True)
        return record

    def run(
        self, agent: Agent[OutT], user_input: str, **kwargs: Any
    ) -> Coroutine[Any, Any, RunRecord[OutT]]:
        """Create a run and drive it to its end; await it for the finished record.

        ``kwargs`` are :meth:`create`'s. (A plain function returning the driving
        coroutine: a run then holds one coroutine frame less while it waits.)
        """
        return self._execute(agent, None, 0, user_input, kwargs)

    def start(
        self, agent: Agent, record: RunRecord, *, admit_ns: int = 0
    ) -> asyncio.Task[RunRecord]:
        """Drive a created run in a background task (cancel it with :meth:`cancel`)."""
        return asyncio.create_task(self.execute(agent, record, admit_ns=admit_ns))

    async def resume(self, agent: Agent[OutT], run_id: str) -> RunRecord[OutT]:
        """Continue a run from its last checkpoint (e.g. after its process was killed).

        Raises :class:`~podium.errors.ConfigError` if the run belongs to another agent:
        driven by this one, its journaled calls would be unknown tools (a human's
        approval thrown away) and its end written under the wrong agent."""
        record = await self.store.get(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        if record.agent != agent.name:
            raise ConfigError(
                f"run {run_id} belongs to agent {record.agent!r}, not {agent.name!r}: "
                f"resume it with {record.agent!r}"
            )
        return await self.execute(agent, record)

    def execute(
        self, agent: Agent, record: RunRecord, *, admit_ns: int = 0
    ) -> Coroutine[Any, Any, RunRecord]:
        """Drive ``record`` from wherever its journal stands to a terminal status (await it)."""
        return self._execute(agent, record, admit_ns)

    async def _start(
        self,
        agent: Agent,
        record: RunRecord | None,
        admit_ns: int,
        user_input: str,
        create: dict[str, Any] | None,
    ) -> tuple[Agent, RunState, Token[EgressPolicy | None] | None] | RunRecord:
        """A drive's start, for the step loop (:meth:`StepLoop._execute`): the run created
        first (for :meth:`run`), its task registered, its state loaded and marked
        ``running``, its tenant's egress policy entered; the agent to drive it with. Or its
        record, if it has ended or waits on a human (then the engine holds nothing of it)."""
        created_running = False  # stored `running` by run() itself: nothing to load or update
        if record is None:  # run(): create it first
            record = await self._create(agent, user_input, **(create or {}), running=True)
            created_running = record.status == "running"
        if record.done:
            return record
        if record.status == "waiting":  # parked on a human: nothing to drive until decided
            return await self._still_waiting(record)
        if record.metadata and CLIENT_TOOLS_KEY in record.metadata:  # a gateway client's
            try:
                agent = with_client_tools(agent, record.metadata[CLIENT_TOOLS_KEY])
            except ConfigError as exc:  # the agent changed since the gateway checked them
                await self.end_stored(record, "failed", "invalid_tools", str(exc))
                return record
        self._models.setdefault(id(agent.model), agent.model)
        if agent.screening is not None and agent.screening.guard is not None:  # (closed too)
            guard_model = agent.screening.guard.model
            self._models.setdefault(id(guard_model), guard_model)
        run_id = record.run_id
        task = asyncio.current_task(self._running_loop())
        if task is not None:
            self._tasks[run_id] = task
        begun: RunState | RunRecord
        try:
            if (created_running and agent.screening is None and record.thread_id is None
                    and not self._ended_outside):
                # A fresh run stored `running` by run() itself, nothing to screen or wait
                # for: no journal to read, no write, no await (so no cancel to catch).
                begun = self._fresh_state(agent, record, admit_ns)
            else:
                begun = await self._begin(agent, record, admit_ns, task, created_running)
        except BaseException:
            self._let_go(run_id, None)
            raise
        if not isinstance(begun, RunState):  # it ended before a step could run
            self._let_go(run_id, None)
            return begun
        begun.task = task
        egress = None
        if record.metadata and EGRESS_KEY in record.metadata:  # a tenant's policy
            egress = enter_egress(record.metadata[EGRESS_KEY])
        return agent, begun, egress

    async def _end_drive(self, state: RunState, end: End | None) -> RunRecord:
        """The step loop's end: written (a completed run's went with its last step), counted,
        the run's thread told; ``end`` None: the run stays as journaled (paused, waiting)."""
        if end is None:
            return state.record
        if end[0] != "completed" or state.record.status != "completed":
            await self._write_end(state, end[0], end[1], error=end[2])
        ended = self._ended(state)
        if ended.thread_id is not None:
            context = state.ctx.messages
            if state.redact is not None:  # a thread keeps what the journal does: no secret
                context = [state.redact.shown(m) for m in context]
            await self.threads.settle_quietly(ended, context)
        return ended

    def _let_go(self, run_id: str, egress: Token[EgressPolicy | None] | None) -> None:
        """The drive of ``run_id`` is over, however it ended: the engine forgets its task."""
        if egress is not None:
            leave_egress(egress)
        self._tasks.pop(run_id, None)
        if self._pausing:  # (mostly empty: a truth test costs less than a call)
            self._pausing.discard(run_id)
        if self._cancelling:
            self._cancelling.discard(run_id)

    def cancel(self, run_id: str) -> bool:
        """Cancel a run driven by this engine; it ends ``cancelled`` at its next await.

        That holds in every phase: loading its journal, the model call, a tool, a
        checkpoint. False when no task of this engine drives the run, or when its end
        is being written already (then it keeps that end).
        """
        task = self._tasks.get(run_id)
        if task is None or task.done():
            return False
        if run_id not in self._cancelling:
            self._cancelling.add(run_id)
            task.cancel()
        return True

    async def cancel_stored(self, record: RunRecord) -> bool:
        """Cancel a run no task of this engine drives (still queued, say) in the store.

        A driver that starts on the run meanwhile (a worker that claimed it) adopts
        that end instead of running it. Returns False, writing nothing, when a driver
        of this engine holds the run: it was cancelled through :meth:`cancel` instead.
        Raises :class:`~podium.errors.StaleRunError` if a store that fences writers
        says another process advanced the run.
        """
        run_id = record.run_id
        if self.cancel(run_id):
            return False
        # No await between the check above and this mark: a driver registers either
        # before (and was cancelled) or after (and waits for this write).
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ended_outside[run_id] = done
        if len(self._ended_outside) > _ENDED_OUTSIDE_KEPT:
            oldest = next(iter(self._ended_outside))
            if self._ended_outside[oldest].done():
                del self._ended_outside[oldest]
        try:
            await self.end_stored(record, "cancelled", "cancelled", "cancelled")
        finally:
            done.set_result(None)
        return True

    def pause(self, run_id: str) -> bool:
        """Ask a run driven here to stop after its current step's checkpoint (for a drain).

        :meth:`execute` then returns the record still ``running``; any worker resumes
        it from that checkpoint with nothing to redo.
        """
        if run_id not in self._tasks:
            return False
        self._pausing.add(run_id)
        return True

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

    def cancelling(self, run_id: str) -> bool:
        """Whether :meth:`cancel` is ending the run (its child runs end with it)."""
        return run_id in self._cancelling

    async def _begin(
        self,
        agent: Agent,
        record: RunRecord,
        admit_ns: int,
        task: asyncio.Task[Any] | None,
        created_running: bool = False,
    ) -> RunState | RunRecord:
        """The run's state, loaded and marked running; or its record if it has ended (in
        the journal, elsewhere, or cancelled before its state was loaded)."""
        run_id = record.run_id
        try:
            if self._ended_outside:
                stored = await self._ended_meanwhile(run_id)
                if stored is not None:
                    return stored
            state = await self._load(agent, record, admit_ns, created_running)
            if state is None:
                if record.thread_id is not None:
                    await self.threads.settle_quietly(record)
                return record
            return state
        except asyncio.CancelledError:
            if run_id not in self._cancelling:
                raise  # shutdown: the run stays `running` and resumes elsewhere
            if task is not None:
                task.uncancel()
            # Cancelled before its state was loaded (reading the journal, first update):
            # end it with the record as stored, unless it has ended there meanwhile.
            self._tasks.pop(run_id, None)
            stored = await self.store.get(run_id)
            if stored is not None and stored.done:
                return stored
            ended = await self._finish_record(record)
            if ended.thread_id is not None:
                await self.threads.settle_quietly(ended)
            return ended

    async def _ended_meanwhile(self, run_id: str) -> RunRecord | None:
        """The stored record if :meth:`cancel_stored` ended the run after its driver read it."""
        ending = self._ended_outside.pop(run_id, None)
        if ending is None:
            return None
        await asyncio.shield(ending)
        stored = await self.store.get(run_id)
        return stored if stored is not None and stored.done else None

    async def _load(
        self, agent: Agent, record: RunRecord, admit_ns: int, created_running: bool = False
    ) -> RunState | None:
        """The run's state from its journal, the record marked ``running``; None if the
        journal says it ended already (the record is then brought level with it).
        ``created_running``: :meth:`run` just stored the record ``running`` (no journal)."""
        history = None
        if record.thread_id is not None:  # waits while runs ahead of it on the thread go
            since = time.perf_counter_ns()
            history = await self.threads.turn(record)
            admit_ns += time.perf_counter_ns() - since  # waiting for the turn is admission
        # A run back in the queue after a human's decision has started before: read its journal.
        fresh = created_running or (record.status == "queued" and record.started_at is None)
        entries = [] if fresh else [e for _, e in await self.store.journal(record.run_id)]
        screened = None
        if fresh and agent.screening is not None:
            screened = await agent.screening.screen_input(record)  # may rewrite the input
            if screened is not None:
                await self.store.append(record.run_id, (screened,))
        state = self._prepared(agent, replay(agent, record, entries, history), admit_ns, entries)
        if screened is not None and screened.verdict.action in ("flag", "redact"):
            remember_flagged(state, record.input)
        if (
            screened is not None
            and screened.verdict.action == "block"
            and agent.screening is not None
            and agent.screening.fails_on_block
        ):
            state.blocked = blocked(screened.verdict)
        if state.finished is not None:  # the journal says it ended; bring the record level
            self._apply_final(state, state.finished)
            await self.store.update(record)
            return None
        if not created_running or screened is not None:  # (screening may rewrite the input)
            record.status = "running"
            if record.started_at is None:
                record.started_at = time.time()
            if record.waiting is not None:  # resumed after a wait (its pause was counted then)
                record.waiting = None
            await self.store.update(record)
        if history and state.step == 0 and state.pending is None:
            await self._fit_history(agent, state)
        if self.hook is not None:  # what it hears at each step of this drive (or nothing)
            state.on_step = self.hook.run_started(agent, record)
        return state

    def _fresh_state(self, agent: Agent, record: RunRecord, admit_ns: int) -> RunState:
        """:meth:`_load` of a run :meth:`run` just stored ``running``, off a thread and with
        nothing to screen: its state from no journal, nothing to write."""
        state = self._prepared(agent, replay(agent, record, []), admit_ns, [])
        if self.hook is not None:  # what it hears at each step of this drive (or nothing)
            state.on_step = self.hook.run_started(agent, record)
        return state

    def _prepared(
        self, agent: Agent, state: RunState, admit_ns: int, entries: list[JournalEntry]
    ) -> RunState:
        """A replayed state made ready to drive: its redactor, its tenant's tools, its
        admission time, its lane, its agent tools and hand-offs."""
        # (the secrets of every agent it may hand off to; the values this run meets)
        redactor = redactor_for(agent)
        state.redact = None if redactor is None else redactor.for_run()
        record = state.record
        state.allowed_tools = allowed_tools(record.metadata) if record.metadata else None
        state.profile.admit_ns = admit_ns
        # A run on the plain path (one side-effect-free call a step, nothing to screen or
        # narrow) takes the step's fast lane; its agent's screening or a tenant's allow-list
        # sends it down the general one. (A hand-off adopts its target's, see attach.)
        adopt(state, agent)
        if agent.multi_agent:  # agent tools or hand-offs: set up once, here
            attach(self, agent, state, entries)
        return state
