"""The async driver: performs a run's I/O around the sans-I/O step logic, and times it.

One coroutine per run; a step is ``assemble → model → parse → tools → merge →
checkpoint``. Awaited work starts eagerly, so calls that do not really wait
(an instant tool, an in-memory store) cost no loop iteration and are timed
exactly; calls that wait are timed as wall time, CPU counted only over the
slices that ran on this run's behalf.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import Token
from typing import Any, TypeVar

import msgspec

from podium.agent import Agent, positive_seconds
from podium.context.tokenizers import MESSAGE_OVERHEAD_TOKENS
from podium.engine import approvals, decisions
from podium.engine.children import attach, child_runs
from podium.engine.handoff import (
    HandoffFilterError,
    adopt,
    filtered,
    find_agent,
    handoff_made,
    switch,
)
from podium.engine.hook import EngineHook
from podium.engine.model_faults import malformed_reply, model_fault, not_a_reply
from podium.engine.output_step import OutputVerdict, judge_reply, plan_output_calls
from podium.engine.profile import ProfileAggregator, StepProfile
from podium.engine.records import (
    ApprovalRequested,
    Compacted,
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    RunStatus,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.engine.replay import PendingStep, RunState, replay
from podium.engine.runids import new_run_id
from podium.engine.step import (
    PlannedCall,
    over_cap,
    plan_one_call,
    plan_tool_calls,
    result_message,
    tool_message,
    truncate_result,
)
from podium.engine.stopwatch import (
    ENDS,
    MODEL_NS,
    CpuClock,
    NoStopwatch,
    SampledStopwatch,
    Stopwatch,
    cpu_clock,
)
from podium.engine.token_stream import stream_model
from podium.errors import (
    ConfigError,
    DecisionError,
    ModelError,
    ModelReplyError,
    RunNotFoundError,
    StaleRunError,
    StoreError,
)
from podium.lifecycle import AsyncCloseable
from podium.messages import Message
from podium.models.base import Model, ModelRequest, ModelResponse
from podium.observe.inspect import with_progress
from podium.output import OutT
from podium.security.allowlist import allowed_tools, restrict_calls
from podium.security.egress import EgressPolicy
from podium.security.output_guard import remember_flagged
from podium.security.redact import RunRedactor, redactor_for, scrub_input
from podium.security.screen import Screened, ScreenVerdict
from podium.security.tenant_egress import EGRESS_KEY, enter_egress, leave_egress, with_egress
from podium.store.base import JournalItem, RunStore
from podium.store.memory import MemoryRunStore
from podium.streaming.base import TokenChannel
from podium.threads.keeper import ThreadKeeper, keeper_for
from podium.tools.agent_tool import HandoffTool
from podium.tools.client import CLIENT_TOOLS_KEY, with_client_tools
from podium.tools.deadlines import arm_deadline
from podium.tools.eager import continuation, own_exit, start_eagerly
from podium.tools.executor import ToolExecutor, ToolResult
from podium.tools.tool import Tool

__all__ = ("Engine", "Observer", "new_run_id")

_NO_CALLS: list[Any] = []  # no call held for approval (shared, never mutated)

T = TypeVar("T")
log = logging.getLogger("podium.engine")

#: Called with (run_id, entry) after each journal append: live printing, streaming.
Observer = Callable[[str, JournalEntry], None]

_ASSEMBLE, _MODEL, _PARSE, _TOOLS, _MERGE, _CHECKPOINT = range(6)
# Where the fast lane stamps each phase's end in its stopwatch's figures (see Stopwatch).
_ASSEMBLED, _ANSWERED, _PARSED, _CALLED, _MERGED = (ENDS + p for p in range(5))
_SUMMARIZE_PROMPT = (
    "Summarize the earlier steps of this agent's work below so it can continue without them. "
    "Keep facts, numbers, ids and open questions; drop pleasantries. Be brief."
)


def _by_index(item: tuple[int, ToolResult]) -> int:
    return item[0]


def _with_answer(agent: Agent, message: Message, output: str) -> Message:
    """``message`` with its structured answer (the ``final_result`` call's arguments, or
    its text) replaced by ``output``, as the output screen left it."""
    spec = agent.output
    if spec is not None and spec.mode == "tool":
        calls = tuple(
            msgspec.structs.replace(c, arguments=output) if c.name == spec.tool_name else c
            for c in message.tool_calls
        )
        return msgspec.structs.replace(message, tool_calls=calls)
    return msgspec.structs.replace(message, content=output)


def _blocked(verdict: ScreenVerdict) -> str:
    what = f"rule {verdict.rule!r} (score {verdict.score})"
    return f"injection screen blocked the {verdict.source}: {what}"


#: How many runs ended by :meth:`Engine.cancel_stored` are remembered for their drivers.
_ENDED_OUTSIDE_KEPT = 4096


def _tool_of(agent: Agent, record: RunRecord, name: str) -> Tool[Any, Any] | None:
    """The tool ``name`` of the agent ``record``'s run stands with now: ``agent`` (the
    run's) or, after a hand-off, the one its hand-offs lead to (``record.active_agent``)."""
    current = find_agent(agent, record.active_agent)
    return None if current is None else current.tools.get(name)


def _ended_record(record: RunRecord, status: RunStatus, reason: str, error: str) -> RunFinished:
    """``record`` ended with ``status`` (for a run whose state is not loaded: its counts
    stay as stored); the entry that journals that end."""
    final = RunFinished(time.time(), status, error=error, reason=reason)
    record.status, record.error, record.reason = status, error, reason
    record.finished_at = final.ts
    return final


def _check_parts(store: object, executor: object) -> None:
    """Refuse at ``Engine(...)`` what would fail at its first run."""
    if store is not None and not isinstance(store, RunStore):
        if isinstance(store, (str, os.PathLike)):
            hint = f"a file is a store once opened: Engine(SQLiteRunStore({str(store)!r}))"
        elif isinstance(store, type):
            hint = f"pass an instance, {store.__name__}(...), not the class"
        else:
            hint = "pass a MemoryRunStore, SQLiteRunStore or RedisRunStore"
        raise ConfigError(f"Engine(store={store!r}) is not a RunStore: {hint}")
    if executor is not None and not isinstance(executor, ToolExecutor):
        raise ConfigError(
            f"Engine(executor={executor!r}) is not a ToolExecutor: to bring your own pool, "
            "pass ToolExecutor(thread_pool=...)"
        )


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


class _Paused(Exception):
    """The run stopped at a step boundary on request (a drain); it stays ``running``."""


class _Waiting(Exception):
    """The run is parked ``waiting`` on a human (journaled); its drive ends here."""


class _Finish(Exception):
    """Ends the step loop with a terminal status (control flow, never escapes the engine)."""

    def __init__(self, status: RunStatus, reason: str | None, error: str | None = None):
        self.status = status
        self.reason = reason
        self.error = error


class Engine(AsyncCloseable):
    """Runs agents: creates runs in a store, drives their steps, resumes them after a crash.

    Example::

        async with Engine(SQLiteRunStore("runs.sqlite")) as engine:
            record = await engine.run(agent, "Where is order A-1?")
            print(record.output, record.profile)

    The workload profile is on by default. ``clock`` says how its CPU figures are
    taken: ``"sampled"`` (the default) estimates each phase's CPU as its running time
    times the thread's CPU/running ratio, measured with the CPU clock around one
    synchronous slice in 32; ``"thread"`` reads it around every slice (exact per
    step, at 0.5–3 µs a read on a virtual machine); ``"wall"`` never reads it. ``profile=False``
    turns the profile off: no clock read at all, runs keep no step profiles.
    """

    def __init__(
        self,
        store: RunStore | None = None,
        executor: ToolExecutor | None = None,
        *,
        aggregator: ProfileAggregator | None = None,
        clock: CpuClock = "sampled",
        observers: Sequence[Observer] = (),
        profile: bool = True,
    ) -> None:
        _check_parts(store, executor)
        self.store = store or MemoryRunStore()
        self._own_store = store is None
        self.executor = executor or ToolExecutor()
        self._own_executor = executor is None
        self.aggregator = aggregator
        self._cpu = cpu_clock(clock)
        #: ``profile=False``: no clock is read and runs keep no workload profile (the floor).
        self.profile = profile
        self._stopwatch: type[Stopwatch] = (
            NoStopwatch if not profile else SampledStopwatch if clock == "sampled" else Stopwatch
        )
        self.observers: list[Observer] = list(observers)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelling: set[str] = set()
        self._pausing: set[str] = set()
        # Runs cancelled in the store by :meth:`cancel_stored` (recent ones, bounded): a
        # driver that read the record before that write adopts the stored end instead.
        self._ended_outside: dict[str, asyncio.Future[None]] = {}
        # Models this engine has driven: their HTTP sessions are opened by our calls, so
        # aclose() closes them (a model used again later reopens its session lazily).
        self._models: dict[int, Model] = {}
        #: Metrics and tracing (see podium.engine.hook); None costs one test per step.
        self.hook: EngineHook | None = None
        #: Where model tokens go while a client listens to a run (see podium.streaming);
        #: None costs one test per step, and so does a channel nobody listens to.
        self.tokens: TokenChannel | None = None

    # -- public API -------------------------------------------------------------------------

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
        record = RunRecord(
            run_id or new_run_id(),
            agent.name,
            scrub_input(agent, user_input),  # (stored, streamed and read without secrets)
            tenant=tenant,
            metadata=with_egress(metadata or {}, egress),
            deadline_s=deadline_s,
            thread_id=thread_id,
        )
        if thread_id is None:
            if running:
                record.status = "running"
                record.started_at = record.created_at
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

    async def end_stored(
        self, record: RunRecord, status: RunStatus, reason: str, error: str
    ) -> None:
        """End in the store a run no driver holds (cancelled before a worker took it, a
        dead-lettered one): its record and a ``RunFinished`` entry in one write, so the
        run's followers and waiters hear of its end as of any other, and this engine's
        observers too. Raises :class:`~podium.errors.StaleRunError` if the run was
        written since ``record`` was read. Its steps and tokens so far are read from its
        journal (a running run's record holds them only from its end). Its unfinished
        child runs (agents it called as tools) end with it, theirs too: only their parent
        drives them, so nothing would again."""
        # One read of its journal serves both: its progress and its children.
        try:
            journal = [] if record.done else await self.store.journal(record.run_id)
        except RunNotFoundError:  # gone since it was read: its append says so
            journal = []
        so_far = with_progress(record, journal)
        record.steps, record.usage, record.profile = so_far.steps, so_far.usage, so_far.profile
        final = _ended_record(record, status, reason, error)
        await self.store.append(record.run_id, (final,), record=record)
        for observer in self.observers:
            observer(record.run_id, final)
        try:
            await self._end_children(record, journal, status, reason, error)
        except (StoreError, ConnectionError, OSError) as exc:  # the parent's end stands
            log.warning("run %s: its children not ended with it: %s", record.run_id, exc)

    async def _end_children(
        self,
        record: RunRecord,
        journal: Sequence[JournalItem],
        status: RunStatus,
        reason: str,
        error: str,
    ) -> None:
        why = (
            f"its parent run {record.run_id} was cancelled"
            if status == "cancelled"
            else f"its parent run {record.run_id} ended {status} ({reason}): {error}"
        )
        for child in await child_runs(self.store, record, journal):
            if child.done:
                continue
            child.waiting = None
            with contextlib.suppress(StaleRunError):  # written meanwhile: as it stands
                await self.end_stored(child, status, reason, why)  # and its own children

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

    # -- human approval (see podium.engine.approvals) ------------------------------------------

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

    @property
    def threads(self) -> ThreadKeeper:
        """The threads (conversations) of this engine's store."""
        return keeper_for(self.store)

    # -- the run ----------------------------------------------------------------------------

    def execute(
        self, agent: Agent, record: RunRecord, *, admit_ns: int = 0
    ) -> Coroutine[Any, Any, RunRecord]:
        """Drive ``record`` from wherever its journal stands to a terminal status (await it)."""
        return self._execute(agent, record, admit_ns)

    async def _execute(
        self,
        agent: Agent,
        record: RunRecord | None,
        admit_ns: int,
        user_input: str = "",
        create: dict[str, Any] | None = None,
    ) -> RunRecord:
        created_running = False  # stored `running` by run() itself: nothing to load or update
        if record is None:  # run(): create it first, in the same frame
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
        egress: Token[EgressPolicy | None] | None = None
        try:
            begun = await self._begin(agent, record, admit_ns, task, created_running)
            if not isinstance(begun, RunState):  # it ended before a step could run
                return begun
            state = begun
            state.task = task
            if record.metadata and EGRESS_KEY in record.metadata:  # a tenant's policy
                egress = enter_egress(record.metadata[EGRESS_KEY])
            deadline = self._arm_deadline(agent, state)
            sink = None if self.aggregator is None else self.aggregator.add_step
            sw = self._stopwatch.start(self._cpu, sink, state.profile.steps)
            # The fast lane ends its phases with `t[_X] = stamp()`: a clock read, no call
            # into Python (the stopwatch books them at the step's snapshot, or sooner).
            t, stamp = sw.t, type(sw).stamp
            # A store that keeps the entry objects (in memory): a step's entry gets its
            # profile as the step closes, made once, not journaled provisional and redone.
            keeps = self.store.keeps_entries and state.redact is None
            end: tuple[RunStatus, str | None, str | None]
            response: ModelResponse | None = None  # the reply the step works on
            try:
                if state.blocked is not None:
                    raise _Finish("failed", "injection_blocked", state.blocked)
                if state.agent is not None:  # resumed after a hand-off
                    agent = state.agent
                if state.pending is not None:
                    await self._resume_pending(agent, state, sw)
                if state.output_failures and state.output_failures > agent.output_retries:
                    raise _Finish(
                        "failed", "invalid_output", "output_retries spent before a restart"
                    )
                ctx = state.ctx
                # The step loop, each step inline in this frame: the hot path of the whole
                # runtime. A run waiting in a tool holds this one coroutine, not one a step
                # (each is an object the collector scans). Awaited work starts eagerly: a
                # call that does not wait (an instant model or tool, an in-memory store)
                # costs no loop iteration. A step with one side-effect-free call is
                # checkpointed by one StepRecord right here; any other goes through
                # _general_step, _output_step or _final_step.
                while True:
                    if agent.handoffs:  # the step just committed may have handed the run over
                        handoff = handoff_made(agent, state)
                        if handoff is not None:
                            agent = await self._hand_off(state, handoff)
                    if self._pausing and run_id in self._pausing:
                        raise _Paused
                    step = state.step
                    if step >= agent.max_steps:
                        raise _Finish(
                            "failed", "max_steps", f"no final answer after {agent.max_steps} steps"
                        )
                    # assemble
                    prefix = agent.prefix
                    if prefix.tokens + ctx.history_tokens > agent.context.max_context_tokens:
                        await self._fit_context(agent, state)
                    request = ModelRequest(
                        ctx.messages,
                        prefix.tools,
                        agent.settings,
                        run_id,
                        agent.name,
                        step,
                        prefix.tokens + ctx.history_tokens,
                        prefix.tokens,
                        agent.tags,
                        t[MODEL_NS] / 1e9,
                    )
                    t[_ASSEMBLED] = stamp()
                    # model
                    tokens = self.tokens
                    if (
                        tokens is not None
                        and tokens.listening(run_id)  # a client listens
                        and (agent.screening is None or not agent.screening.holds_output)
                    ):
                        response = await stream_model(
                            agent, request, sw, tokens, _MODEL, state.redact
                        )
                    else:
                        coro = agent.model.request(request)
                        try:
                            pending = coro.send(None)
                        except StopIteration as answered:  # no wait (simulated, cached)
                            response = answered.value
                        except ModelReplyError:
                            response = await self._call_model(agent, request, sw, 1)
                        except (ModelError, OSError):
                            raise
                        except Exception as exc:  # a bug in the model's code
                            raise model_fault(agent.model, exc) from exc
                        except GeneratorExit as own:  # the model's own: nothing closes it here
                            raise model_fault(agent.model, own_exit(own)) from own
                        else:
                            response = await self._wait_model(agent, request, sw, coro, pending)
                        del coro  # a finished coroutine is one more object for the collector
                    if not isinstance(response, ModelResponse):  # a custom model's mistake
                        raise not_a_reply(agent.model, response)
                    t[_ANSWERED] = stamp()
                    # parse
                    message = Message(
                        "assistant",
                        response.content,
                        response.tool_calls,
                        reasoning=response.reasoning,
                    )
                    state.add_usage(response.usage)
                    ttft = 0 if response.ttft_s is None else int(response.ttft_s * 1e9)
                    if agent.output is not None:
                        if await self._output_step(agent, state, sw, message, response, ttft):
                            break
                        continue
                    calls = response.tool_calls
                    if not calls:
                        ctx.append(message)
                        t[_PARSED] = stamp()
                        await self._final_step(agent, state, sw, message, response, ttft)
                        break
                    call = plan_one_call(agent, run_id, step, calls)
                    if (
                        call is None
                        or state.general
                        or call.tool.policy.side_effects
                        or call.tool.approval is not None
                    ):
                        if call is None:  # several calls, or something wrong with them
                            planned, rejected, cut = plan_tool_calls(agent, run_id, step, calls)
                        else:
                            planned, rejected, cut = [call], [], None
                        if rejected:
                            state.invalid_calls += len(rejected) - over_cap(agent, calls)
                        if cut is not None:  # oversized names, ids or arguments: the context
                            message.tool_calls = cut  # and the journal get them cut
                        ctx.append(message)
                        sw.lap(_PARSE)
                        await self._general_step(
                            agent, state, sw, message, response, planned, rejected, ttft
                        )
                        del planned, rejected, cut  # the run's later waits need none of them
                        continue
                    ctx.append(message)
                    t[_PARSED] = stamp()
                    # tools: the one call, side-effect free, so it is journaled with the step
                    started = self.executor.start(call.tool, call.args, call.ctx, task)
                    if isinstance(started, ToolResult):
                        result = started
                    else:
                        sw.suspend(_TOOLS)
                        try:
                            result = await started
                        finally:
                            sw.resume(_TOOLS)
                        sw.add_cpu(_TOOLS, result.cpu_ns)
                        if result.blocked_ns:  # it slept on the loop while timed as a wait
                            sw.add_blocked(_TOOLS, result.blocked_ns)
                    del started  # the finished call's generator: one object fewer to scan
                    answer = result_message(agent, call.tool, result, ctx.tokenizer)  # (cut)
                    t[_CALLED] = stamp()
                    if not result.ok and result.error == "interrupted":  # the tool asked a human
                        outcome = [(call.index, result)]
                        await self._park(
                            agent, state, [call], [], [], outcome, {}, (message, response),
                            sw, ttft,
                        )
                    # merge
                    ctx.append(answer)
                    compaction = None
                    if ctx.history_tokens + prefix.tokens > agent.context.max_context_tokens:
                        compaction = await self._compact(agent, state, sw)
                    t[_MERGED] = stamp()
                    # checkpoint
                    state.step = step + 1
                    if keeps and compaction is None and not self.observers:
                        entry = StepRecord(
                            step, time.time(), message, (result,), response.usage, None
                        )
                        if not self.store.append_nowait(run_id, (entry,)):  # kept, no copy
                            waiting = self._checkpoint(state, (entry,), sw)  # (it said it
                            if waiting is not None:  # would): timed as any write that waits
                                await waiting
                        entry.profile = profile = sw.close_new(step, 1, ttft)  # (filed)
                    else:
                        profile = sw.snapshot(step, 1, ttft)
                        entry = StepRecord(
                            step, time.time(), message, (result,), response.usage, profile
                        )
                        entries = (entry,) if compaction is None else (entry, compaction)
                        waiting = self._checkpoint(state, entries, sw)
                        if waiting is not None:
                            await waiting
                        sw.close_step(profile)  # files the profile in state.profile.steps
                    on_step = state.on_step
                    if on_step is not None:  # profile=False: the hook still hears of the step
                        if profile is None:
                            profile = StepProfile(step, (), (), 1, ttft)
                        on_step(agent, state.record, profile, state, ((call.index, result),))
                end = ("completed", None, None)  # recorded with the last step
            except _Finish as exc:
                end = (exc.status, exc.reason, exc.error)
            except (_Paused, _Waiting):
                return record
            except ModelReplyError as exc:
                end = ("failed", "invalid_reply", str(exc))
            except ModelError as exc:
                end = ("failed", "model_error", f"{type(exc).__name__}: {exc}")
            except (TypeError, AttributeError):
                # A reply of the right class with fields of the wrong types (a custom model's
                # mistake: arguments as a dict, a call as a tuple) fails where the step first
                # reads them; checked here, on the error's path, not at every step.
                fault = malformed_reply(agent.model, response)
                if fault is None:
                    raise  # not the reply's fault: a bug, as it is
                end = ("failed", "model_error", f"ModelError: {fault}")
            except asyncio.CancelledError:
                end = self._cancelled(state, deadline)  # re-raises on shutdown
            finally:
                if state.alarm is not None:
                    state.alarm.disarm()
                sw.finish()  # the last steps' CPU figures, exact
            if end[0] != "completed" or state.record.status != "completed":
                await self._write_end(state, end[0], end[1], error=end[2])
            ended = self._ended(state)
            if ended.thread_id is not None:
                await self.threads.settle_quietly(ended, state.ctx.messages)
            return ended
        finally:
            if egress is not None:
                leave_egress(egress)
            self._tasks.pop(run_id, None)
            if self._pausing:  # (mostly empty: a truth test costs less than a call)
                self._pausing.discard(run_id)
            if self._cancelling:
                self._cancelling.discard(run_id)

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

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, remembered: on 3.11 asking for it is a getpid() system call."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

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
        state = replay(agent, record, entries, history)
        # (the secrets of every agent it may hand off to; the values this run meets)
        redactor = redactor_for(agent)
        state.redact = None if redactor is None else redactor.for_run()
        state.allowed_tools = allowed_tools(record.metadata) if record.metadata else None
        state.profile.admit_ns = admit_ns
        # A run on the plain path (one side-effect-free call a step, nothing to screen or
        # narrow) takes the step's fast lane; its agent's screening or a tenant's allow-list
        # sends it down the general one. (A hand-off adopts its target's, see attach.)
        adopt(state, agent)
        if agent.multi_agent:  # agent tools or hand-offs: set up once, here
            attach(self, agent, state, entries)
        if screened is not None and screened.verdict.action in ("flag", "redact"):
            remember_flagged(state, record.input)
        if (
            screened is not None
            and screened.verdict.action == "block"
            and agent.screening is not None
            and agent.screening.fails_on_block
        ):
            state.blocked = _blocked(screened.verdict)
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

    async def _fit_history(self, agent: Agent, state: RunState) -> None:
        """A thread's history with the new input over budget: compact before the first call
        (journaled, so a resume replays the same context)."""
        if state.ctx.tokens > agent.context.max_context_tokens:
            compaction = await self._compact(agent, state, NoStopwatch.start(self._cpu))
            if compaction is not None:
                await self._append(state, (compaction,))

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

    async def _wait_model(
        self,
        agent: Agent,
        request: ModelRequest,
        sw: Stopwatch,
        coro: Coroutine[Any, Any, ModelResponse],
        pending: Any,
    ) -> ModelResponse:
        """The model call started by the step loop (in :meth:`_execute`) waits: time the
        wait, retry a bad reply."""
        sw.suspend(_MODEL)
        try:
            return await continuation(coro, pending)
        except ModelReplyError:
            if agent.model_retries < 1:
                raise
        except (ModelError, OSError):
            raise
        except Exception as exc:  # a bug in the model's code
            raise model_fault(agent.model, exc) from exc
        finally:
            sw.resume(_MODEL)
        return await self._call_model(agent, request, sw, 1)

    async def _final_step(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        response: ModelResponse,
        ttft: int,
        output: str | None = None,
    ) -> None:
        """The reply is the answer: journal the step and the run's end in one write.
        ``output`` is a structured answer's JSON (else the answer is the reply's text)."""
        step = state.step
        state.step = step + 1
        sw.settle()  # the record stored with the run's end carries exact figures
        profile = sw.snapshot(step, 0, ttft)
        if profile is not None:
            state.profile.steps.append(profile)
        screened: tuple[Screened, ...] = ()
        screening = agent.screening
        if screening is not None and screening.outputs is not None:
            matcher = None if state.redact is None else state.redact.matcher
            found = (
                screening.screen_output(response.content, matcher)
                if output is None
                else screening.screen_structured(output, matcher)
            )
            if found is not None:
                verdict, text = found
                screened = (Screened(time.time(), verdict),)
                # A structured answer cannot be half withheld and still be its type:
                # blocked, the run fails whatever on_block says.
                if verdict.action == "block" and (
                    screening.on_block == "fail" or output is not None
                ):
                    await self._append(state, screened, sw)
                    raise _Finish("failed", "output_blocked", _blocked(verdict))
                if output is not None:
                    if text != output:  # the journaled reply carries what leaves, too
                        message = _with_answer(agent, message, text)
                    output = text
                elif text != response.content:  # what leaves the run is what the screen left
                    response.content = text
                    message = msgspec.structs.replace(message, content=text)
        if output is None:
            final = RunFinished(time.time(), "completed", output=response.content)
        else:
            final = RunFinished(time.time(), "completed", output=output, structured=True)
        final = self._apply_final(state, final)
        entry = StepRecord(step, final.ts, message, (), response.usage, profile)
        self._tasks.pop(state.record.run_id, None)  # its end is decided: a cancel is too late
        if state.alarm is not None:  # and so is its deadline
            state.alarm.disarm()
        waiting = self._checkpoint(state, (*screened, entry, final), sw, state.record)
        if waiting is not None:
            await waiting
        sw.close_step(profile)
        on_step = state.on_step
        if on_step is not None:
            if profile is None:  # Engine(profile=False): the hook still hears of the step
                profile = StepProfile(step, (), (), 0, ttft)
            on_step(agent, state.record, profile, state, ())

    async def _output_step(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        response: ModelResponse,
        ttft: int,
    ) -> bool:
        """A reply to an agent with an ``output_type``: its answer is decoded and validated
        in one pass (in the parse phase); a failed one goes back to the model as an
        observation until the agent's ``output_retries`` are spent."""
        assert agent.output is not None
        verdict = judge_reply(agent.output, message)
        ctx = state.ctx
        if verdict.output is not None:
            ctx.append(message)
            sw.lap(_PARSE)
            await self._final_step(agent, state, sw, message, response, ttft, verdict.output)
            return True
        feedback = verdict.feedback
        if feedback is not None:  # no tool calls, no valid answer: the model reads why
            ctx.append(message)
            ctx.append(feedback)
            sw.lap(_PARSE)
            step = state.step
            profile = sw.snapshot(step, 0, ttft)
            entry = OutputRejected(
                step, time.time(), message, feedback, verdict.error, response.usage, profile
            )
            state.step = step + 1
            await self._append(state, (entry,), sw)
            sw.close_step(profile)  # files the profile in state.profile.steps
            on_step = state.on_step
            if on_step is not None:
                if profile is None:  # Engine(profile=False): the hook still hears of the step
                    profile = StepProfile(step, (), (), 0, ttft)
                on_step(agent, state.record, profile, state, ())
            self._output_failed(agent, state, verdict)
            return False
        record = state.record
        calls = message.tool_calls
        planned, rejected, cut, invalid = plan_output_calls(
            agent, record.run_id, state.step, calls, verdict
        )
        state.invalid_calls += invalid
        if cut is not None:
            message.tool_calls = cut
        ctx.append(message)
        sw.lap(_PARSE)
        await self._general_step(agent, state, sw, message, response, planned, rejected, ttft)
        if verdict.rejected is not None:
            self._output_failed(agent, state, verdict)
        return False

    @staticmethod
    def _output_failed(agent: Agent, state: RunState, verdict: OutputVerdict) -> None:
        """Count a failed answer (journaled already); past the budget the run fails."""
        state.output_failures += 1
        if state.output_failures > agent.output_retries:
            assert agent.output is not None
            raise _Finish(
                "failed",
                "invalid_output",
                f"no valid {agent.output.name} after {state.output_failures} attempts "
                f"(output_retries={agent.output_retries}); last error: {verdict.error}",
            )

    async def _general_step(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        response: ModelResponse,
        planned: list[PlannedCall],
        rejected: list[tuple[int, ToolResult]],
        ttft: int,
    ) -> None:
        """A step off the fast lane: several calls, side effects, approvals, rejected calls,
        screening, a tenant's allow-list."""
        if len(planned) > 1 or (
            planned and (planned[0].tool.policy.side_effects or planned[0].tool.approval)
        ):
            # Durable before any tool runs: a resume then re-runs only unfinished calls, under
            # the same idempotency keys. A lone side-effect-free call rides with the commit.
            profile = sw.snapshot(state.step, 0, ttft)  # so far: kept if the step resumes
            turn = ModelTurn(state.step, time.time(), message, response.usage, profile)
            await self._append(state, (turn,), sw)
            sw.lap(_CHECKPOINT)
            await self._finish_step(agent, state, sw, planned, rejected, {}, None, ttft)
        else:
            await self._finish_step(
                agent, state, sw, planned, rejected, {}, (message, response), ttft
            )

    async def _finish_step(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        planned: list[PlannedCall],
        rejected: list[tuple[int, ToolResult]],
        done: dict[int, ToolResult],
        deferred: tuple[Message, ModelResponse] | None,
        ttft: int = 0,
    ) -> None:
        """Tools, merge and checkpoint. ``deferred`` is the reply whose turn is not journaled
        yet: then the whole step is one :class:`StepRecord`."""
        step = state.step
        if state.allowed_tools is not None:  # the tenant's allow-list narrows the agent's
            planned, rejected = restrict_calls(
                planned, rejected, state.allowed_tools, state.record.tenant
            )
        call_verdicts: list[ScreenVerdict] = []
        screening = agent.screening
        if screening is not None and screening.outputs is not None and state.flagged:
            planned, rejected, call_verdicts = screening.screen_calls(
                planned, rejected, state.flagged
            )
        held = _NO_CALLS
        if agent.gated:  # some calls may need a human's approval first
            planned, held = approvals.gate(planned, state.approved)
        # tools
        interrupts = self.executor.interrupts
        if len(planned) == 1 and not done:
            results = [await self._run_one(agent, state, planned[0], sw)]
        else:
            results = await self._run_tools(agent, state, planned, done, sw)
        sw.lap(_TOOLS)
        if held or self.executor.interrupts != interrupts:
            await self._park(
                agent, state, planned, held, rejected, results, done, deferred, sw, ttft
            )
        # merge
        if rejected:
            outcomes = [*rejected, *results]
            outcomes.sort(key=_by_index)
        elif done:  # a resumed step: the outcomes known before it come first in `results`
            outcomes = sorted(results, key=_by_index)
        else:
            outcomes = results
        ctx = state.ctx
        for _, result in outcomes:
            ctx.append(tool_message(result))
            if (
                screening is not None
                and screening.outputs is not None
                and result.screen is not None
                and result.screen.action in ("flag", "redact")
            ):
                remember_flagged(state, result.content)
        compaction = None
        if ctx.tokens > agent.context.max_context_tokens:
            compaction = await self._compact(agent, state, sw)
        sw.lap(_MERGE)
        # checkpoint
        ts = time.time()
        profile = sw.snapshot(step, len(outcomes), ttft)
        entries: list[JournalEntry]
        if deferred is not None:
            message, response = deferred
            in_order = tuple([r for _, r in outcomes])
            entries = [StepRecord(step, ts, message, in_order, response.usage, profile)]
        else:
            entries = [ToolOutcome(step, ts, i, r) for i, r in rejected]
            if len(planned) == 1 and not done:  # else _run_tools journaled each as it finished
                entries.extend([ToolOutcome(step, ts, i, r) for i, r in results if i not in done])
            entries.append(StepCommitted(step, ts, profile))
        if compaction is not None:
            entries.append(compaction)
        # (a refused call's verdict rides with its result; one let run is journaled here)
        entries.extend(Screened(ts, v) for v in call_verdicts if v.action in ("allow", "flag"))
        state.step = step + 1
        await self._append(state, entries, sw)
        sw.close_step(profile)  # files the profile in state.profile.steps
        on_step = state.on_step
        if on_step is not None:  # Engine(profile=False): the hook still hears of the step
            if profile is None:
                profile = StepProfile(step, (), (), len(outcomes), ttft)
            on_step(agent, state.record, profile, state, outcomes)
        if agent.screening is not None and agent.screening.fails_on_block:
            for _, result in outcomes:
                if result.error == "blocked" and result.screen is not None:
                    raise _Finish("failed", "injection_blocked", _blocked(result.screen))
        if state.invalid_calls > agent.max_invalid_tool_calls:
            raise _Finish(
                "failed",
                "invalid_tool_calls",
                f"{state.invalid_calls} invalid tool calls (limit {agent.max_invalid_tool_calls})",
            )

    async def _resume_pending(self, agent: Agent, state: RunState, sw: Stopwatch) -> None:
        """Finish a step that was cut off after its model turn: run only the missing calls."""
        pending = state.pending
        assert pending is not None
        calls = pending.message.tool_calls
        run_id = state.record.run_id
        verdict = None
        if agent.output is None:
            planned, rejected, _ = plan_tool_calls(agent, run_id, pending.step, calls)
            state.invalid_calls += len(rejected) - over_cap(agent, calls)
        else:  # an invalid final_result call among the step's calls gets its observation
            verdict = judge_reply(agent.output, pending.message)
            planned, rejected, _, invalid = plan_output_calls(
                agent, run_id, pending.step, calls, verdict
            )
            state.invalid_calls += invalid
        state.pending = None
        ttft = 0
        if pending.profile is not None:  # what the step did before it stopped
            sw.carry(pending.profile)
            ttft = pending.profile.ttft_ns
        done = pending.outcomes
        if done:  # journaled already (ran, refused, decided by a human): never again
            planned = [call for call in planned if call.index not in done]
            rejected = [item for item in rejected if item[0] not in done]
        if pending.requests is not None or pending.interrupted is not None:
            planned = await self._after_humans(agent, state, pending, planned, rejected)
        await self._finish_step(agent, state, sw, planned, rejected, dict(done), None, ttft)
        if verdict is not None and verdict.rejected is not None:
            self._output_failed(agent, state, verdict)
        state.approved = frozenset()

    # -- waiting on humans (see podium.engine.approvals) ------------------------------------

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
        ``waiting``, in one write; then end the drive (:class:`_Waiting`). Returns if no
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
            raise _Finish("failed", approvals.SUBAGENT_WAITING, approvals.child_cannot_wait(asks))
        now = time.time()
        record.status = "waiting"
        record.waiting = approvals.waiting_for(agent, record, now)
        record.steps = state.step
        record.usage = state.usage
        if state.alarm is not None:
            state.alarm.disarm()
        await self._append(state, entries, record=record)
        raise _Waiting

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

    # -- pieces -----------------------------------------------------------------------------

    async def _call_model(
        self, agent: Agent, request: ModelRequest, sw: Stopwatch, attempt: int = 0
    ) -> ModelResponse:
        """Call the model, asking again (up to ``agent.model_retries``) on a reply it
        could not make sense of; ``attempt`` counts the tries made already."""
        while True:
            if attempt > agent.model_retries:
                raise ModelReplyError(f"{agent.model.name}: no valid reply in {attempt} tries")
            try:
                response, _ = await self._eager(agent.model.request(request), sw, _MODEL)
            except ModelReplyError:
                if attempt >= agent.model_retries:
                    raise
                attempt += 1
                continue
            except (ModelError, OSError):
                raise
            except Exception as exc:  # a bug in the model's code
                raise model_fault(agent.model, exc) from exc
            return response

    async def _run_one(
        self, agent: Agent, state: RunState, call: PlannedCall, sw: Stopwatch
    ) -> tuple[int, ToolResult]:
        """One call, started eagerly, truncated and screened. (The step loop's fast lane
        inlines the first half: a run waiting in its tool then holds one frame less.)"""
        started = self.executor.start(call.tool, call.args, call.ctx, state.task)
        if isinstance(started, ToolResult):
            result = started
        else:
            sw.suspend(_TOOLS)
            try:
                result = await started
            finally:
                sw.resume(_TOOLS)
            sw.add_cpu(_TOOLS, result.cpu_ns)
            if result.blocked_ns:
                sw.add_blocked(_TOOLS, result.blocked_ns)
        result = truncate_result(agent, call.tool, result)
        if agent.screening is not None:  # a screener that waits (a remote classifier) waits
            result, _ = await self._eager(agent.screening.screen_result(result), sw, _TOOLS)
        return call.index, result

    async def _run_tools(
        self,
        agent: Agent,
        state: RunState,
        planned: list[PlannedCall],
        done: dict[int, ToolResult],
        sw: Stopwatch,
    ) -> list[tuple[int, ToolResult]]:
        """Several calls: they overlap, and each outcome is journaled as soon as it is known,
        so a crash mid-step re-runs only the calls still in flight."""
        results = list(done.items())
        todo = [p for p in planned if p.index not in done]
        if not todo:
            return results
        sw.suspend(_TOOLS)
        tasks = [asyncio.ensure_future(self._run_journaled(agent, state, c)) for c in todo]
        try:
            gathered = await asyncio.gather(*tasks)
        except BaseException:
            # A failed checkpoint (the store away, or the run taken over) ends this drive:
            # stop the other calls too, so none journals an outcome behind a resumed drive.
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
        sw.resume(_TOOLS)
        sw.add_cpu(_TOOLS, sum([r.cpu_ns for _, r in gathered]))
        sw.add_blocked(_TOOLS, sum([r.blocked_ns for _, r in gathered]))
        results.extend(gathered)
        return results

    async def _run_journaled(
        self, agent: Agent, state: RunState, call: PlannedCall
    ) -> tuple[int, ToolResult]:
        """One of several calls of a step, in a task of its own: run, then journal its outcome.
        (The step's stopwatch is suspended meanwhile: cutting and screening the result here
        on the loop is CPU the call's result reports, with the call's own.)"""
        result = await self.executor.execute(call.tool, call.args, call.ctx)
        began = time.perf_counter_ns()
        result = truncate_result(agent, call.tool, result)
        rest = None
        if agent.screening is not None:  # (a screen that waits: its first slice counts)
            result, rest = start_eagerly(agent.screening.screen_result(result))
        ran = time.perf_counter_ns() - began
        if rest is not None:
            result = await rest
        result.cpu_ns += ran
        await self._append(state, (ToolOutcome(state.step, time.time(), call.index, result),))
        return call.index, result

    async def _fit_context(self, agent: Agent, state: RunState) -> None:
        """The prompt is over budget as a model call is due (a long input, a hand-off to a
        smaller budget, a last turn compaction could not shrink): compact where that helps
        (journaled, as at a thread's start), else end the run: no prompt is sent over
        ``max_context_tokens``."""
        compaction = await self._compact(agent, state, NoStopwatch.start(self._cpu))
        if compaction is not None:
            await self._append(state, (compaction,))
        tokens = state.ctx.tokens
        budget = agent.context.max_context_tokens
        if tokens > budget:
            raise _Finish(
                "failed",
                "context_overflow",
                f"the prompt needs {tokens} tokens, over max_context_tokens={budget} even "
                "with every turn it may drop summarized: the input, the instructions and "
                "tool schemas, or the latest turn are too long",
            )

    async def _hand_off(self, state: RunState, tool: HandoffTool) -> Agent:
        """Continue the run with ``tool``'s target; with an input filter, on the history it
        keeps, journaled before the target's first step (see podium.engine.handoff)."""
        target = switch(state, tool.target)
        if tool.input_filter is not None:
            try:
                entry = filtered(state, tool)
            except HandoffFilterError as exc:
                raise _Finish("failed", "handoff_filter", str(exc)) from exc
            await self._append(state, (entry,))
        return target

    async def _compact(self, agent: Agent, state: RunState, sw: Stopwatch) -> Compacted | None:
        policy = agent.context
        ctx = state.ctx
        plan = ctx.plan_compaction(
            policy.max_context_tokens, policy.keep_last_turns, policy.summary_max_tokens
        )
        if plan is None:
            return None
        method = "extractive"
        summary: str | None = None
        # The summary is journaled: it quotes the context with its secrets withheld (and so
        # does the transcript a summarizing model reads).
        shown = state.redact.shown if isinstance(state.redact, RunRedactor) else None
        if policy.compaction == "model":
            tokenizer = ctx.tokenizer
            instructions = Message("system", _SUMMARIZE_PROMPT)
            around = tokenizer.count_message(instructions) + MESSAGE_OVERHEAD_TOKENS
            # The summarizer's prompt keeps to the budget too.
            prompt = tokenizer.truncate(
                ctx.transcript(plan, shown=shown), max(0, policy.max_context_tokens - around)
            )
            request = ModelRequest(
                [instructions, Message("user", prompt)],
                run_id=state.record.run_id,
                agent=agent.name,
                step=state.step,
                prompt_tokens=around + tokenizer.count(prompt),
            )
            try:
                response, _ = await self._eager(agent.model.request(request), sw, _MERGE)
            except ModelError:
                response = None
            except OSError:
                raise
            except Exception as exc:  # a bug in the model's code: summarize without it
                model_fault(agent.model, exc)
                response = None
            if isinstance(response, ModelResponse) and response.content.strip():
                summary = tokenizer.truncate(response.content, plan.summary_tokens)
                method = "model"
                state.add_usage(response.usage)
        if summary is None:
            summary = ctx.extractive_summary(plan, plan.summary_tokens, shown)
        message = ctx.apply_compaction(plan, summary)
        return Compacted(state.step, time.time(), plan.start, plan.end, message, method)

    async def _eager(
        self, coro: Coroutine[Any, Any, T], sw: Stopwatch, phase: int
    ) -> tuple[T, bool]:
        """Run ``coro``'s first slice inline; if it suspends, stop counting CPU until it resumes."""
        value, rest = start_eagerly(coro)
        if rest is None:
            return value, False
        sw.suspend(phase)
        try:
            value = await rest
        finally:
            sw.resume(phase)
        return value, True

    async def _append(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch | None = None,
        *,
        record: RunRecord | None = None,
    ) -> None:
        """Journal ``entries`` (with ``record``), timed as the checkpoint phase of ``sw``."""
        if sw is None:  # a call of several, journaled from its own task: nothing to time
            if state.redact is not None:
                entries = state.redact(entries)
            await self.store.append(state.record.run_id, entries, record=record)
            if self.observers:
                self._notify(state, entries)
            return
        waiting = self._checkpoint(state, entries, sw, record)
        if waiting is not None:
            await waiting

    def _checkpoint(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch,
        record: RunRecord | None = None,
    ) -> Awaitable[None] | None:
        """Start journaling ``entries``: None if the store took them without waiting (an
        in-memory store: no loop iteration), else an awaitable that finishes the write."""
        if state.redact is not None:
            entries = state.redact(entries)
        store = self.store
        run_id = state.record.run_id
        if store.append_nowait(run_id, entries, record=record):
            if self.observers:
                self._notify(state, entries)
            return None
        coro = store.append(run_id, entries, record=record)
        try:
            pending = coro.send(None)
        except StopIteration:
            if self.observers:
                self._notify(state, entries)
            return None
        return self._wait_checkpoint(state, entries, sw, coro, pending)

    async def _wait_checkpoint(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch,
        coro: Coroutine[Any, Any, int | None],
        pending: Any,
    ) -> None:
        sw.suspend(_CHECKPOINT)
        try:
            off_loop = await continuation(coro, pending)
        finally:
            sw.resume(_CHECKPOINT)
        if off_loop:  # the store's own thread's CPU for this write (SQLite's): not waiting
            sw.add_cpu(_CHECKPOINT, off_loop)
        if self.observers:
            self._notify(state, entries)

    def _notify(self, state: RunState, entries: Sequence[JournalEntry]) -> None:
        """Show journaled entries to the observers (their time counts as the checkpoint's)."""
        run_id = state.record.run_id
        for observer in self.observers:
            for entry in entries:
                observer(run_id, entry)

    def _apply_final(self, state: RunState, final: RunFinished) -> RunFinished:
        """Bring the record level with the run's end; the end as it is to be written (its
        output and error without the run's secrets: the record and the journal show them)."""
        if isinstance(state.redact, RunRedactor):
            final = state.redact.final(final)
        record = state.record
        record.status = final.status
        record.output = final.output
        record.error = final.error
        record.reason = final.reason
        record.finished_at = final.ts
        record.structured = final.structured
        record.steps = state.step
        record.usage = state.usage
        record.profile = state.profile
        return final

    async def _write_end(
        self,
        state: RunState,
        status: RunStatus,
        reason: str | None,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        """Journal and store the run's end (a completed run's went with its final step)."""
        record = state.record
        self._tasks.pop(record.run_id, None)  # its end is decided: a cancel is too late
        final = self._apply_final(state, RunFinished(time.time(), status, output, error, reason))
        await self._write_final(record, final)

    def _ended(self, state: RunState) -> RunRecord:
        """The run's end is stored: count it, tell the hook, give its record."""
        record = state.record
        if self.aggregator is not None:
            self.aggregator.finish_run(state.profile.admit_ns)
        if self.hook is not None:
            self.hook.run_finished(record)
        return record

    async def _finish_record(self, record: RunRecord) -> RunRecord:
        """End ``cancelled`` a run whose state was never loaded: the record keeps its counts."""
        final = _ended_record(record, "cancelled", "cancelled", "cancelled")
        await self._write_final(record, final)
        return record

    async def _write_final(self, record: RunRecord, final: RunFinished) -> None:
        """Journal the run's end with its record, whatever cancels arrive meanwhile."""
        try:
            await asyncio.shield(self.store.append(record.run_id, (final,), record=record))
        except StaleRunError:
            # A cancel that cut our own record write short leaves us a version behind the
            # store (fencing stores): take the stored version unless the run ended there.
            if final.status != "cancelled":
                raise
            stored = await self.store.get(record.run_id)
            if stored is None or stored.done:
                raise
            record.version = stored.version
            await asyncio.shield(self.store.append(record.run_id, (final,), record=record))
        for observer in self.observers:
            observer(record.run_id, final)

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        models, self._models = list(self._models.values()), {}
        for model in models:
            await model.aclose()
        if self._own_executor:
            self.executor.close()
        if self._own_store:
            await self.store.aclose()
