"""The async driver: performs a run's I/O around the sans-I/O step logic, and times it.

One coroutine per run; a step is ``assemble → model → parse → tools → merge →
checkpoint``. Awaited work starts eagerly, so calls that do not really wait
(an instant tool, an in-memory store) cost no loop iteration and are timed
exactly; calls that wait are timed as wall time, CPU counted only over the
slices that ran on this run's behalf.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
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
from podium.engine.step import PlannedCall, plan_tool_calls, tool_message, truncate_result
from podium.engine.stopwatch import CpuClock, Stopwatch, cpu_clock
from podium.errors import ModelError, ModelReplyError, RunNotFoundError
from podium.lifecycle import AsyncCloseable
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
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


_ID_PREFIX = uuid.uuid4().hex[:12]
_id_counter = itertools.count(1)


def _by_index(item: tuple[int, ToolResult]) -> int:
    return item[0]


def new_run_id() -> str:
    """A unique run id: a random per-process prefix and a counter (no syscall per id)."""
    return f"run_{_ID_PREFIX}{next(_id_counter):08x}"


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
    ) -> RunRecord:
        """Store a new ``queued`` run without starting it."""
        record = RunRecord(
            run_id or new_run_id(), agent.name, user_input, tenant=tenant, metadata=metadata or {}
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
        """Cancel a run driven by this engine; it ends ``cancelled`` at its next await."""
        task = self._tasks.get(run_id)
        if task is None or task.done():
            return False
        self._cancelling.add(run_id)
        task.cancel()
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
        run_id = record.run_id
        task = asyncio.current_task()
        if task is not None:
            self._tasks[run_id] = task
        try:
            entries = (
                []
                if record.status == "queued"
                else [e for _, e in await self.store.journal(run_id)]
            )
            state = replay(agent, record, entries)
            state.profile.admit_ns = admit_ns
            if state.finished is not None:  # the journal says it ended; bring the record level
                self._apply_final(state, state.finished)
                await self.store.update(record)
                return record
            now = time.time()
            record.status = "running"
            if record.started_at is None:
                record.started_at = now
            await self.store.update(record)
            if self.hook is not None:
                self.hook.run_started(agent, record)
            deadline = agent.deadline_s
            timeout = None if deadline is None else max(0.0, record.started_at + deadline - now)
            scope: asyncio.Timeout | None = None
            try:
                if timeout is None:
                    await self._steps(agent, state)
                else:
                    async with asyncio.timeout(timeout) as scope:
                        await self._steps(agent, state)
            except _Finish as end:
                return await self._finish(state, end.status, end.reason, error=end.error)
            except _Paused:
                return record
            except TimeoutError:
                if scope is None or not scope.expired():
                    raise
                return await self._finish(
                    state, "failed", "deadline", error=f"deadline of {deadline}s passed"
                )
            except ModelReplyError as exc:
                return await self._finish(state, "failed", "invalid_reply", error=str(exc))
            except ModelError as exc:
                return await self._finish(
                    state, "failed", "model_error", error=f"{type(exc).__name__}: {exc}"
                )
            except asyncio.CancelledError:
                if run_id in self._cancelling:
                    self._cancelling.discard(run_id)
                    if task is not None:
                        task.uncancel()
                    return await self._finish(state, "cancelled", "cancelled", error="cancelled")
                raise  # shutdown: the run stays `running` and resumes elsewhere
            return await self._finish(state, "completed", None)  # recorded with the last step
        finally:
            self._tasks.pop(run_id, None)
            self._pausing.discard(run_id)

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
        message = Message("assistant", response.content, response.tool_calls)
        ctx.append(message)
        state.add_usage(response.usage)
        ttft = int(response.ttft_s * 1e9) if response.ttft_s is not None else 0
        if not response.tool_calls:
            sw.lap(_PARSE)
            await self._final_step(state, sw, message, response, ttft)
            if self.hook is not None:
                self.hook.step(agent, record, state.profile.steps[-1], state.usage, ())
            return True
        planned, rejected = plan_tool_calls(agent, record.run_id, step, response.tool_calls)
        state.invalid_calls += len(rejected)
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
        planned, rejected = plan_tool_calls(
            agent, state.record.run_id, pending.step, pending.message.tool_calls
        )
        state.invalid_calls += len(rejected)
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
            return [(call.index, truncate_result(agent, call.tool, result))]
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
            await self._append(state, (ToolOutcome(state.step, time.time(), call.index, result),))
            return call.index, result

        gathered = await asyncio.gather(*(one(c) for c in todo))
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
        if status == "completed" and record.status == "completed":
            pass  # already journaled and stored with the final step
        else:
            final = RunFinished(time.time(), status, output, error, reason)
            self._apply_final(state, final)
            await asyncio.shield(self.store.append(record.run_id, (final,), record=record))
            for observer in self.observers:
                observer(record.run_id, final)
        if self.aggregator is not None:
            self.aggregator.finish_run(state.profile.admit_ns)
        if self.hook is not None:
            self.hook.run_finished(record)
        return record

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        if self._own_executor:
            self.executor.close()
        if self._own_store:
            await self.store.aclose()
