"""The async driver: performs a run's I/O around the sans-I/O step logic, and times it.

One coroutine per run; a step is ``assemble → model → parse → tools → merge →
checkpoint``. Awaited work starts eagerly, so calls that do not really wait
(an instant tool, an in-memory store) cost no loop iteration and are timed
exactly; calls that wait are timed as wall time, CPU counted only over the
slices that ran on this run's behalf.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from podium.agent import Agent
from podium.engine.hook import EngineHook
from podium.engine.profile import ProfileAggregator, StepProfile
from podium.engine.records import (
    Compacted,
    JournalEntry,
    ModelTurn,
    RunFinished,
    RunRecord,
    RunStatus,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.engine.replay import RunState, replay
from podium.engine.step import (
    PlannedCall,
    over_cap,
    plan_tool_calls,
    tool_message,
    truncate_result,
)
from podium.engine.stopwatch import CpuClock, Stopwatch, cpu_clock
from podium.errors import ModelError, ModelReplyError, RunNotFoundError, StaleRunError
from podium.lifecycle import AsyncCloseable
from podium.messages import Message
from podium.models.base import Model, ModelRequest, ModelResponse
from podium.security.allowlist import allowed_tools, restrict_calls
from podium.security.egress import EgressPolicy
from podium.security.redact import redactor_for
from podium.security.screen import ScreenVerdict
from podium.security.tenant_egress import EGRESS_KEY, decode_egress, run_egress, with_egress
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.tools.deadlines import arm_deadline
from podium.tools.eager import Continuation, start_eagerly
from podium.tools.executor import ToolExecutor, ToolResult

__all__ = ("Engine", "Observer", "new_run_id")

T = TypeVar("T")

#: Called with (run_id, entry) after each journal append: live printing, streaming.
Observer = Callable[[str, JournalEntry], None]

_ASSEMBLE, _MODEL, _PARSE, _TOOLS, _MERGE, _CHECKPOINT = range(6)
_SUMMARIZE_PROMPT = (
    "Summarize the earlier steps of this agent's work below so it can continue without them. "
    "Keep facts, numbers, ids and open questions; drop pleasantries. Be brief."
)


def _by_index(item: tuple[int, ToolResult]) -> int:
    return item[0]


def _blocked(verdict: ScreenVerdict) -> str:
    what = f"rule {verdict.rule!r} (score {verdict.score})"
    return f"injection screen blocked the {verdict.source}: {what}"


def new_run_id() -> str:
    """An unguessable run id: ``run_`` and 128 random bits in hex.

    Random rather than counted, so the ids one tenant sees say nothing about how
    many runs other tenants start (nor let anyone guess another run's id).
    """
    return "run_" + secrets.token_hex(16)


#: How many runs ended by :meth:`Engine.cancel_stored` are remembered for their drivers.
_ENDED_OUTSIDE_KEPT = 4096


class _Paused(Exception):
    """The run stopped at a step boundary on request (a drain); it stays ``running``."""


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
    """

    def __init__(
        self,
        store: RunStore | None = None,
        executor: ToolExecutor | None = None,
        *,
        aggregator: ProfileAggregator | None = None,
        clock: CpuClock = "thread",
        observers: Sequence[Observer] = (),
    ) -> None:
        self.store = store or MemoryRunStore()
        self._own_store = store is None
        self.executor = executor or ToolExecutor()
        self._own_executor = executor is None
        self.aggregator = aggregator
        self._cpu = cpu_clock(clock)
        self.observers: list[Observer] = list(observers)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
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
        egress: EgressPolicy | None = None,
    ) -> RunRecord:
        """Store a new ``queued`` run without starting it.

        ``deadline_s`` overrides the agent's deadline for this run (``math.inf``: none).
        ``egress`` narrows where its tools may connect (the tenant's policy).
        """
        record = RunRecord(
            run_id or new_run_id(),
            agent.name,
            user_input,
            tenant=tenant,
            metadata=with_egress(metadata or {}, egress),
            deadline_s=deadline_s,
        )
        await self.store.create(record)
        return record

    async def run(self, agent: Agent, user_input: str, **kwargs: Any) -> RunRecord:
        """Create a run and drive it to its end; returns the finished record."""
        record = await self.create(agent, user_input, **kwargs)
        return await self.execute(agent, record)

    def start(
        self, agent: Agent, record: RunRecord, *, admit_ns: int = 0
    ) -> asyncio.Task[RunRecord]:
        """Drive a created run in a background task (cancel it with :meth:`cancel`)."""
        return asyncio.create_task(self.execute(agent, record, admit_ns=admit_ns))

    async def resume(self, agent: Agent, run_id: str) -> RunRecord:
        """Continue a run from its last checkpoint (e.g. after its process was killed)."""
        record = await self.store.get(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
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
            final = RunFinished(time.time(), "cancelled", error="cancelled", reason="cancelled")
            record.status, record.error, record.reason = "cancelled", "cancelled", "cancelled"
            record.finished_at = final.ts
            await self.store.append(run_id, (final,), record=record)
            for observer in self.observers:
                observer(run_id, final)
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

    # -- the run ----------------------------------------------------------------------------

    async def execute(self, agent: Agent, record: RunRecord, *, admit_ns: int = 0) -> RunRecord:
        """Drive ``record`` from wherever its journal stands to a terminal status."""
        if record.done:
            return record
        self._models.setdefault(id(agent.model), agent.model)
        run_id = record.run_id
        task = asyncio.current_task()
        if task is not None:
            self._tasks[run_id] = task
        try:
            try:
                if self._ended_outside:
                    stored = await self._ended_meanwhile(run_id)
                    if stored is not None:
                        return stored
                state = await self._load(agent, record, admit_ns)
                if state is None:
                    return record
                if record.metadata and EGRESS_KEY in record.metadata:  # a tenant's policy
                    policy = decode_egress(record.metadata[EGRESS_KEY])
                    return await run_egress(policy, self._drive(agent, state))
                return await self._drive(agent, state)
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
            return await self._finish_record(record)
        finally:
            self._tasks.pop(run_id, None)
            self._pausing.discard(run_id)
            self._cancelling.discard(run_id)

    async def _ended_meanwhile(self, run_id: str) -> RunRecord | None:
        """The stored record if :meth:`cancel_stored` ended the run after its driver read it."""
        ending = self._ended_outside.pop(run_id, None)
        if ending is None:
            return None
        await asyncio.shield(ending)
        stored = await self.store.get(run_id)
        return stored if stored is not None and stored.done else None

    async def _load(self, agent: Agent, record: RunRecord, admit_ns: int) -> RunState | None:
        """The run's state from its journal, the record marked ``running``; None if the
        journal says it ended already (the record is then brought level with it)."""
        entries = (
            []
            if record.status == "queued"
            else [e for _, e in await self.store.journal(record.run_id)]
        )
        screened = None
        if record.status == "queued" and agent.screening is not None:
            screened = await agent.screening.screen_input(record)  # may rewrite the input
            if screened is not None:
                await self.store.append(record.run_id, (screened,))
        state = replay(agent, record, entries)
        state.redact = redactor_for(agent)
        state.allowed_tools = allowed_tools(record.metadata) if record.metadata else None
        state.profile.admit_ns = admit_ns
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
        now = time.time()
        record.status = "running"
        if record.started_at is None:
            record.started_at = now
        await self.store.update(record)
        if self.hook is not None:
            self.hook.run_started(agent, record)
        return state

    async def _drive(self, agent: Agent, state: RunState) -> RunRecord:
        record = state.record
        run_id = record.run_id
        deadline = agent.deadline_s if record.deadline_s is None else record.deadline_s
        task = asyncio.current_task()
        alarm = None
        if deadline is not None and deadline != math.inf and task is not None:
            assert record.started_at is not None
            left = record.started_at + deadline - time.time()
            # A fresh run arms its deadline as the same float as every other (one wheel queue).
            fresh = 0.0 <= deadline - left < min(1.0, deadline / 10)
            alarm = state.alarm = arm_deadline(task, deadline if fresh else max(0.0, left))
        end: tuple[RunStatus, str | None, str | None]
        try:
            if state.blocked is not None:
                raise _Finish("failed", "injection_blocked", state.blocked)
            await self._steps(agent, state)
            end = ("completed", None, None)  # recorded with the last step
        except _Finish as exc:
            end = (exc.status, exc.reason, exc.error)
        except _Paused:
            return record
        except ModelReplyError as exc:
            end = ("failed", "invalid_reply", str(exc))
        except ModelError as exc:
            end = ("failed", "model_error", f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            cancelled = run_id in self._cancelling
            expired = alarm is not None and alarm.fired
            if not (cancelled or expired):
                raise  # shutdown: the run stays `running` and resumes elsewhere
            assert task is not None
            for _ in range(cancelled + expired):
                task.uncancel()
            if cancelled:
                end = ("cancelled", "cancelled", "cancelled")
            else:
                end = ("failed", "deadline", f"deadline of {deadline}s passed")
        finally:
            if alarm is not None:
                alarm.disarm()
        return await self._finish(state, end[0], end[1], error=end[2])

    async def _steps(self, agent: Agent, state: RunState) -> None:
        sw = Stopwatch(self._cpu)  # one per run: each step starts where the last one ended
        if state.pending is not None:
            await self._resume_pending(agent, state, sw)
        pausing = self._pausing
        while True:
            if pausing and state.record.run_id in pausing:
                raise _Paused
            if state.step >= agent.max_steps:
                raise _Finish(
                    "failed", "max_steps", f"no final answer after {agent.max_steps} steps"
                )
            if await self._step(agent, state, sw):
                return

    async def _step(self, agent: Agent, state: RunState, sw: Stopwatch) -> bool:
        """One step, inline and timed: the hot path of the whole runtime."""
        record = state.record
        ctx = state.ctx
        step = state.step
        # assemble
        request = ModelRequest(
            ctx.messages,
            agent.prefix.tools,
            agent.settings,
            record.run_id,
            agent.name,
            step,
            ctx.tokens,
            agent.prefix.tokens,
            agent.tags,
            state.attained_s,
        )
        sw.lap(_ASSEMBLE)
        # model
        response = await self._call_model(agent, request, sw)
        sw.lap(_MODEL)
        state.attained_s += sw.wall[_MODEL] / 1e9
        # parse
        message = Message(
            "assistant", response.content, response.tool_calls, reasoning=response.reasoning
        )
        state.add_usage(response.usage)
        ttft = int(response.ttft_s * 1e9) if response.ttft_s is not None else 0
        calls = response.tool_calls
        if not calls:
            ctx.append(message)
            sw.lap(_PARSE)
            await self._final_step(state, sw, message, response, ttft)
            if self.hook is not None:
                self.hook.step(agent, record, state.profile.steps[-1], state.usage, ())
            return True
        planned, rejected, cut = plan_tool_calls(agent, record.run_id, step, calls)
        if rejected:
            state.invalid_calls += len(rejected) - over_cap(agent, calls)
            if cut is not None:  # oversized rejected calls: context and journal get them cut
                message.tool_calls = cut
        ctx.append(message)
        sw.lap(_PARSE)
        if len(planned) > 1 or (planned and planned[0].tool.policy.side_effects):
            # Durable before any tool runs: a resume then re-runs only unfinished calls, under
            # the same idempotency keys. A lone side-effect-free call rides with the commit.
            await self._append(state, (ModelTurn(step, time.time(), message, response.usage),), sw)
            sw.lap(_CHECKPOINT)
            await self._finish_step(agent, state, sw, planned, rejected, {}, None, ttft)
        else:
            await self._finish_step(
                agent, state, sw, planned, rejected, {}, (message, response), ttft
            )
        return False

    async def _final_step(
        self, state: RunState, sw: Stopwatch, message: Message, response: ModelResponse, ttft: int
    ) -> None:
        """The reply has no tool calls: journal the step and the run's end in one write."""
        step = state.step
        state.step = step + 1
        sw.flush()  # the record stored with the run's end carries this step's profile
        profile = StepProfile(step, tuple(sw.wall), tuple(sw.cpu), 0, ttft)
        state.profile.steps.append(profile)
        final = RunFinished(time.time(), "completed", output=response.content)
        self._apply_final(state, final)
        entry = StepRecord(step, final.ts, message, (), response.usage, profile)
        self._tasks.pop(state.record.run_id, None)  # its end is decided: a cancel is too late
        if state.alarm is not None:  # and so is its deadline
            state.alarm.disarm()
        await self._append(state, (entry, final), sw, record=state.record)
        self._close_step(sw, profile)

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
        # tools
        results = await self._run_tools(agent, state, planned, done, sw)
        sw.lap(_TOOLS)
        # merge
        if rejected:
            outcomes = [*rejected, *results]
            outcomes.sort(key=_by_index)
        else:
            outcomes = results
        ctx = state.ctx
        for _, result in outcomes:
            ctx.append(tool_message(result))
        compaction = None
        if ctx.tokens > agent.context.max_context_tokens:
            compaction = await self._compact(agent, state, sw)
        sw.lap(_MERGE)
        # checkpoint
        ts = time.time()
        sw.flush()  # the journaled profile covers the phases up to here
        profile = StepProfile(step, tuple(sw.wall), tuple(sw.cpu), len(outcomes), ttft)
        entries: list[JournalEntry]
        if deferred is not None:
            message, response = deferred
            results_in_order = (
                (outcomes[0][1],) if len(outcomes) == 1 else tuple(r for _, r in outcomes)
            )
            entries = [StepRecord(step, ts, message, results_in_order, response.usage, profile)]
        else:
            entries = [ToolOutcome(step, ts, i, r) for i, r in rejected]
            if len(planned) == 1:  # several calls journal their own outcomes as each finishes
                entries.extend(ToolOutcome(step, ts, i, r) for i, r in results if i not in done)
            entries.append(StepCommitted(step, ts, profile))
        if compaction is not None:
            entries.append(compaction)
        state.step = step + 1
        await self._append(state, entries, sw)
        self._close_step(sw, profile)
        state.profile.steps.append(profile)
        if self.hook is not None:
            self.hook.step(agent, state.record, profile, state.usage, outcomes)
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

    def _close_step(self, sw: Stopwatch, profile: StepProfile) -> None:
        """End the checkpoint phase, file the step's timings, start the next step's clock."""
        sw.lap(_CHECKPOINT)
        sw.flush_phase(_CHECKPOINT)  # the step was flushed before its journal write
        profile.wall_ns, profile.cpu_ns = tuple(sw.wall), tuple(sw.cpu)
        sw.restart()
        if self.aggregator is not None:
            self.aggregator.add_step(profile)

    async def _resume_pending(self, agent: Agent, state: RunState, sw: Stopwatch) -> None:
        """Finish a step that was cut off after its model turn: run only the missing calls."""
        pending = state.pending
        assert pending is not None
        calls = pending.message.tool_calls
        planned, rejected, _ = plan_tool_calls(agent, state.record.run_id, pending.step, calls)
        state.invalid_calls += len(rejected) - over_cap(agent, calls)
        state.pending = None
        await self._finish_step(agent, state, sw, planned, rejected, dict(pending.outcomes), None)

    # -- pieces -----------------------------------------------------------------------------

    async def _call_model(
        self, agent: Agent, request: ModelRequest, sw: Stopwatch
    ) -> ModelResponse:
        attempt = 0
        while True:
            coro = agent.model.request(request)
            try:
                try:
                    pending = coro.send(None)
                except StopIteration as done:  # answered without waiting (simulated, cached)
                    response: ModelResponse = done.value
                    return response
                sw.suspend(_MODEL)
                try:
                    response = await Continuation(coro, pending)
                finally:
                    sw.resume()
            except ModelReplyError:
                if attempt >= agent.model_retries:
                    raise
                attempt += 1
                continue
            return response

    async def _run_tools(
        self,
        agent: Agent,
        state: RunState,
        planned: list[PlannedCall],
        done: dict[int, ToolResult],
        sw: Stopwatch,
    ) -> list[tuple[int, ToolResult]]:
        execute = self.executor.execute
        if len(planned) == 1 and not done:
            call = planned[0]
            coro = execute(call.tool, call.args, call.ctx)
            try:
                pending = coro.send(None)
            except StopIteration as finished:  # the tool answered without waiting
                result: ToolResult = finished.value
            else:
                sw.suspend(_TOOLS)
                try:
                    result = await Continuation(coro, pending)
                finally:
                    sw.resume()
                sw.add_cpu(_TOOLS, result.cpu_ns)
            result = truncate_result(agent, call.tool, result)
            if agent.screening is not None:
                result = await agent.screening.screen_result(result)
            return [(call.index, result)]
        results = list(done.items())
        todo = [p for p in planned if p.index not in done]
        if not todo:
            return results
        # Several calls: they overlap, and each outcome is journaled as soon as it is known,
        # so a crash mid-step re-runs only the calls still in flight.
        sw.suspend(_TOOLS)

        async def one(call: PlannedCall) -> tuple[int, ToolResult]:
            result = truncate_result(
                agent, call.tool, await execute(call.tool, call.args, call.ctx)
            )
            if agent.screening is not None:
                result = await agent.screening.screen_result(result)
            await self._append(state, (ToolOutcome(state.step, time.time(), call.index, result),))
            return call.index, result

        tasks = [asyncio.ensure_future(one(c)) for c in todo]
        try:
            gathered = await asyncio.gather(*tasks)
        except BaseException:
            # A failed checkpoint (the store away, or the run taken over) ends this drive:
            # stop the other calls too, so none journals an outcome behind a resumed drive.
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
        sw.resume()
        sw.add_cpu(_TOOLS, sum(r.cpu_ns for _, r in gathered))
        results.extend(gathered)
        return results

    async def _compact(self, agent: Agent, state: RunState, sw: Stopwatch) -> Compacted | None:
        policy = agent.context
        ctx = state.ctx
        plan = ctx.plan_compaction(policy.max_context_tokens, policy.keep_last_turns)
        if plan is None:
            return None
        method = "extractive"
        summary: str | None = None
        if policy.compaction == "model":
            prompt = ctx.transcript(plan)
            request = ModelRequest(
                [Message("system", _SUMMARIZE_PROMPT), Message("user", prompt)],
                run_id=state.record.run_id,
                agent=agent.name,
                step=state.step,
                prompt_tokens=policy.tokenizer.count(prompt),
            )
            try:
                response, _ = await self._eager(agent.model.request(request), sw, _MERGE)
            except ModelError:
                response = None
            if response is not None and response.content.strip():
                summary = ctx.tokenizer.truncate(response.content, policy.summary_max_tokens)
                method = "model"
                state.add_usage(response.usage)
        if summary is None:
            summary = ctx.extractive_summary(plan, policy.summary_max_tokens)
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
            sw.resume()
        return value, True

    async def _append(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch | None = None,
        *,
        record: RunRecord | None = None,
    ) -> None:
        if state.redact is not None:
            entries = state.redact(entries)
        coro = self.store.append(state.record.run_id, entries, record=record)
        if sw is None:
            await coro
        else:
            try:
                pending = coro.send(None)
            except StopIteration:  # an in-memory store: no wait, no loop iteration
                pass
            else:
                sw.suspend(_CHECKPOINT)
                try:
                    await Continuation(coro, pending)
                finally:
                    sw.resume()
        if self.observers:
            if sw is not None:
                sw.pause(_CHECKPOINT)  # observers' time is theirs, not the checkpoint's
            for observer in self.observers:
                for entry in entries:
                    observer(state.record.run_id, entry)
            if sw is not None:
                sw.unpause()

    def _apply_final(self, state: RunState, final: RunFinished) -> None:
        record = state.record
        record.status = final.status
        record.output = final.output
        record.error = final.error
        record.reason = final.reason
        record.finished_at = final.ts
        record.steps = state.step
        record.usage = state.usage
        record.profile = state.profile

    async def _finish(
        self,
        state: RunState,
        status: RunStatus,
        reason: str | None,
        output: str | None = None,
        error: str | None = None,
    ) -> RunRecord:
        record = state.record
        self._tasks.pop(record.run_id, None)  # its end is decided: a cancel is too late
        if status == "completed" and record.status == "completed":
            pass  # already journaled and stored with the final step
        else:
            final = RunFinished(time.time(), status, output, error, reason)
            self._apply_final(state, final)
            await self._write_final(record, final)
        if self.aggregator is not None:
            self.aggregator.finish_run(state.profile.admit_ns)
        if self.hook is not None:
            self.hook.run_finished(record)
        return record

    async def _finish_record(self, record: RunRecord) -> RunRecord:
        """End ``cancelled`` a run whose state was never loaded: the record keeps its counts."""
        final = RunFinished(time.time(), "cancelled", None, "cancelled", "cancelled")
        record.status, record.error, record.reason = "cancelled", "cancelled", "cancelled"
        record.finished_at = final.ts
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
