"""The step loop: the hot path of the whole runtime, one function with each step inline.

:meth:`StepLoop._execute` is long on purpose. A step of the plain path (one
side-effect-free tool call, nothing to screen) runs in its frame from the request to the
checkpoint: no coroutine is made for it and none is held while it waits, and a call that
does not wait (an instant model or tool, an in-memory store) costs no loop iteration.
Whatever a step rarely does leaves that frame for a helper (in this module, or in the
layers below: :mod:`podium.engine.steps`, :mod:`podium.engine.calls`): a restart, the
general lane, a model that raised, a tool that asked a human, compaction, the loop's end.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from podium.agent import Agent
from podium.engine.base import (
    ANSWERED,
    ASSEMBLED,
    CALLED,
    MERGED,
    MODEL,
    PARSE,
    PARSED,
    TOOLS,
    End,
    Finish,
    Paused,
    Waiting,
)
from podium.engine.handoff import handoff_made
from podium.engine.lifecycle import RunLifecycle
from podium.engine.model_faults import malformed_reply, not_a_reply
from podium.engine.profile import StepProfile
from podium.engine.records import Compacted, RunRecord, StepRecord
from podium.engine.replay import RunState
from podium.engine.step import PlannedCall, over_cap, plan_one_call, plan_tool_calls, result_message
from podium.engine.stopwatch import MODEL_NS, Stopwatch
from podium.engine.token_stream import stream_model
from podium.errors import ModelError, ModelReplyError
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.tools.deadlines import arm_deadline
from podium.tools.eager import first_slice
from podium.tools.executor import ToolResult

_COMPLETED: End = ("completed", None, None)


def _unfinished(state: RunState) -> bool:
    """Whether a drive starts where its run stopped mid-way (a step cut off, a hand-off
    made, retries spent) or where it must not go on (its input blocked)."""
    return (
        state.pending is not None
        or state.agent is not None
        or state.blocked is not None
        or state.output_failures > 0
    )


def _no_answer(agent: Agent) -> str:
    return f"no final answer after {agent.max_steps} steps"


def _book_tool(sw: Stopwatch, result: ToolResult) -> None:
    """Book a tool call that waited: its own CPU (its slices, timed by the executor), and
    the time it slept on the loop while timed as a wait."""
    sw.add_cpu(TOOLS, result.cpu_ns)
    if result.blocked_ns:
        sw.add_blocked(TOOLS, result.blocked_ns)


def _tell_hook(
    agent: Agent,
    state: RunState,
    step: int,
    profile: StepProfile | None,
    ttft: int,
    index: int,
    result: ToolResult,
) -> None:
    """Tell the run's hook of a fast-lane step (with profile=False it still hears of it)."""
    assert state.on_step is not None
    if profile is None:
        profile = StepProfile(step, (), (), 1, ttft)
    state.on_step(agent, state.record, profile, state, ((index, result),))


def _streams(agent: Agent) -> bool:
    """Whether a run a client listens to streams its model's tokens (not when its screening
    holds the answer back to screen it whole)."""
    return agent.screening is None or not agent.screening.holds_output


class StepLoop(RunLifecycle):
    """The step loop (:meth:`_execute`) and the cold branches it leaves to helpers."""

    async def _execute(self, agent: Agent, record: RunRecord | None, admit_ns: int,
                       user_input: str = "", create: dict[str, Any] | None = None) -> RunRecord:
        """A run's drive: started (:meth:`_start`), its steps, its end (:meth:`_end_drive`)."""
        begun = await self._start(agent, record, admit_ns, user_input, create)
        if not isinstance(begun, tuple):  # ended, or waiting, before a step could run
            return begun
        agent, state, egress = begun  # (the run's task is registered: let go below)
        del begun  # (a tuple the collector would scan while the run waits)
        run_id, task = state.record.run_id, state.task
        deadline = self._arm_deadline(agent, state)
        sw = self._start_stopwatch(state)
        # A phase ends with `t[X] = stamp()`: a clock read, booked at the step's snapshot.
        t, stamp = sw.t, type(sw).stamp
        # A store that keeps entries as given (memory): a step's gets its profile as it
        # closes, made once, not journaled provisional and redone.
        keeps = self.store.keeps_entries and state.redact is None
        response: ModelResponse | None = None  # the reply the step works on
        end: End | None = _COMPLETED  # (written with the last step)
        try:
            if _unfinished(state):  # a run that stopped mid-way, or must not go on
                agent = await self._restart(agent, state, sw)
            ctx = state.ctx
            # A run waiting in a tool holds this one coroutine, not one a step (each is an
            # object the collector scans). A step with one side-effect-free call is journaled
            # by one StepRecord right here; any other by _general/_output/_final_step.
            while True:
                if agent.handoffs and handoff_made(agent, state) is not None:
                    agent = await self._handed_off(agent, state)  # (by the step just made)
                if self._pausing and run_id in self._pausing:
                    raise Paused
                step = state.step
                if step >= agent.max_steps:
                    raise Finish("failed", "max_steps", _no_answer(agent))
                prefix = agent.prefix  # assemble
                prompt = prefix.tokens + ctx.history_tokens
                if prompt > agent.context.max_context_tokens:
                    await self._fit_context(agent, state)
                    prompt = prefix.tokens + ctx.history_tokens
                request = ModelRequest(
                    ctx.messages, prefix.tools, agent.settings, run_id, agent.name, step,
                    prompt, prefix.tokens, agent.tags, t[MODEL_NS] / 1e9,
                )
                t[ASSEMBLED] = stamp()
                # model: its first slice inline (no wait, simulated or cached: no frame, no turn)
                if self.tokens is not None and self.tokens.listening(run_id):  # a client listens
                    response = await self._listened(agent, state, request, sw)
                else:
                    first = first_slice(agent.model.request(request))  # (no StopIteration)
                    try:
                        out = next(first)
                    except BaseException as exc:  # a reply to ask again, or the model's fault
                        response = await self._model_raised(agent, request, sw, exc)
                    else:
                        if first.gi_yieldfrom is None:  # no wait (simulated, cached)
                            next(first, None)  # (ends: returns None)
                            response = out
                        else:
                            response = await self._wait_model(agent, request, sw, first, out)
                        del out
                    del first  # a finished generator is one more object for the collector
                del request  # (not held while the step's tool waits)
                if not isinstance(response, ModelResponse):  # a custom model's mistake
                    raise not_a_reply(agent.model, response)
                t[ANSWERED] = stamp()
                state.add_usage(response.usage)  # parse
                ttft = 0 if response.ttft_s is None else int(response.ttft_s * 1e9)
                calls = response.tool_calls
                call = None if agent.output is not None or not calls else (
                    plan_one_call(agent, run_id, step, calls)
                )
                if (call is None or state.general or call.tool.policy.side_effects
                        or call.tool.approval is not None):  # not the fast lane's step
                    message = Message(
                        "assistant", response.content, calls, reasoning=response.reasoning
                    )
                    if agent.output is not None:
                        if await self._output_step(agent, state, sw, message, response, ttft):
                            break
                        continue
                    if not calls:  # the answer
                        ctx.append(message)
                        t[PARSED] = stamp()
                        await self._final_step(agent, state, sw, message, response, ttft)
                        break
                    # several calls, side effects, approval…
                    await self._general_lane(agent, state, sw, message, response, call, ttft)
                    continue
                # one side-effect-free call: the reply counted as its message is built (it
                # enters the context with the call's answer, in one append_step). (Fields read
                # twice, not named: each name is a slot in every run's frame, started or not.)
                message = Message("assistant", response.content, calls, None, None, ctx.tokenizer
                                  .count_reply(response.content, calls, response.reasoning),
                                  response.reasoning)
                t[PARSED] = stamp()
                # tools: the one call, side-effect free, so it is journaled with the step; a
                # call that waits is awaited here (its run then holds this frame only)
                result = self.executor.start(call.tool, call.args, call.ctx, task)
                if not isinstance(result, ToolResult):  # it waits (its generator: dropped)
                    sw.suspend(TOOLS)
                    try:
                        result = await result
                    finally:
                        sw.resume(TOOLS)
                    _book_tool(sw, result)
                answer = result_message(agent, call.tool, result, ctx.tokenizer)  # (cut)
                t[CALLED] = stamp()
                if not result.ok and result.error == "interrupted":  # the tool asked a human
                    await self._park_one(agent, state, call, result, message, response, sw)
                ctx.append_step(message, answer)  # merge
                compaction = None
                if ctx.history_tokens + prefix.tokens > agent.context.max_context_tokens:
                    compaction = await self._compact(agent, state, sw)
                t[MERGED] = stamp()
                state.step = step + 1  # checkpoint
                if keeps and compaction is None and not self.observers:
                    entry = StepRecord(step, time.time(), message, (result,), response.usage, None)
                    if not self.store.append_nowait(run_id, (entry,)):  # kept, no copy (else,
                        await self._append(state, (entry,), sw)  # timed as any write)
                    entry.profile = profile = sw.close_new(step, 1, ttft)  # (filed)
                else:  # a store that copies, observers to show it, a compaction with it
                    profile = await self._commit(state, sw, message, result, response, compaction)
                if state.on_step is not None:  # metrics, tracing (see podium.engine.hook)
                    _tell_hook(agent, state, step, profile, ttft, call.index, result)
        except BaseException as exc:  # how the loop stopped, sorted off its path
            end = self._stopped(exc, agent, state, deadline, response)  # (None: as it is)
        finally:
            if state.alarm is not None:
                state.alarm.disarm()
            sw.finish()  # the last steps' CPU figures, exact
            self._let_go(run_id, egress)  # its end is decided: a cancel now is too late
        return await self._end_drive(state, end)

    # -- the loop's cold branches -------------------------------------------------------------

    async def _restart(self, agent: Agent, state: RunState, sw: Stopwatch) -> Agent:
        """Before the first step of a drive that is not the run's first: its input blocked
        (it fails), the agent a hand-off left it with, a step cut off after its model turn
        (finished now), output retries spent. Returns the agent to go on with."""
        if state.blocked is not None:
            raise Finish("failed", "injection_blocked", state.blocked)
        if state.agent is not None:  # resumed after a hand-off
            agent = state.agent
        if state.pending is not None:
            await self._resume_pending(agent, state, sw)
        if state.output_failures and state.output_failures > agent.output_retries:
            raise Finish("failed", "invalid_output", "output_retries spent before a restart")
        return agent

    async def _handed_off(self, agent: Agent, state: RunState) -> Agent:
        """The agent the step just made hands the run to (one is made: see
        :func:`~podium.engine.handoff.handoff_made`)."""
        handoff = handoff_made(agent, state)
        assert handoff is not None
        return await self._hand_off(state, handoff)

    async def _general_lane(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        response: ModelResponse,
        call: PlannedCall | None,
        ttft: int,
    ) -> None:
        """A reply the fast lane does not take (``call`` None: several calls, or something
        wrong with them): its calls planned, counted and cut, then :meth:`_general_step`."""
        calls = response.tool_calls
        if call is None:
            planned, rejected, cut = plan_tool_calls(agent, state.record.run_id, state.step, calls)
        else:
            planned, rejected, cut = [call], [], None
        if rejected:
            state.invalid_calls += len(rejected) - over_cap(agent, calls)
        if cut is not None:  # oversized names, ids or arguments: the context
            message.tool_calls = cut  # and the journal get them cut
        state.ctx.append(message)
        sw.lap(PARSE)
        await self._general_step(agent, state, sw, message, response, planned, rejected, ttft)

    async def _commit(
        self,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        result: ToolResult,
        response: ModelResponse,
        compaction: Compacted | None,
    ) -> StepProfile | None:
        """The fast lane's checkpoint of its step (``state.step`` is the next one now) where
        the store does not keep the entry as given (it copies, it waits), observers are
        shown it, or a compaction goes with it: one StepRecord, its profile in it."""
        step = state.step - 1
        ttft = 0 if response.ttft_s is None else int(response.ttft_s * 1e9)
        profile = sw.snapshot(step, 1, ttft)
        entry = StepRecord(step, time.time(), message, (result,), response.usage, profile)
        entries = (entry,) if compaction is None else (entry, compaction)
        waiting = self._checkpoint(state, entries, sw)
        if waiting is not None:
            await waiting
        sw.close_step(profile)  # files the profile in state.profile.steps
        return profile

    def _start_stopwatch(self, state: RunState) -> Stopwatch:
        """The drive's stopwatch, filing its steps' profiles in the run's (and the
        aggregator's, if any)."""
        sink = None if self.aggregator is None else self.aggregator.add_step
        return self._stopwatch.start(self._cpu, sink, state.profile.steps)

    async def _listened(
        self, agent: Agent, state: RunState, request: ModelRequest, sw: Stopwatch
    ) -> ModelResponse:
        """The model call of a run a client listens to: its tokens streamed to the client as
        they come, unless the run's screening holds the answer back to screen it whole (then
        called as the step loop calls it)."""
        tokens = self.tokens
        assert tokens is not None
        if _streams(agent):
            return await stream_model(agent, request, sw, tokens, MODEL, state.redact)
        first = first_slice(agent.model.request(request))
        try:
            out = next(first)
        except BaseException as exc:
            return await self._model_raised(agent, request, sw, exc)
        if first.gi_yieldfrom is None:
            next(first, None)
            return out  # type: ignore[no-any-return]
        return await self._wait_model(agent, request, sw, first, out)

    async def _park_one(
        self,
        agent: Agent,
        state: RunState,
        call: PlannedCall,
        result: ToolResult,
        message: Message,
        response: ModelResponse,
        sw: Stopwatch,
    ) -> None:
        """The fast lane's call asked a human (raised Interrupt): park the run on it."""
        ttft = 0 if response.ttft_s is None else int(response.ttft_s * 1e9)
        outcome = [(call.index, result)]
        deferred = (message, response)
        await self._park(agent, state, [call], [], [], outcome, {}, deferred, sw, ttft)

    def _stopped(
        self,
        exc: BaseException,
        agent: Agent,
        state: RunState,
        deadline: float | None,
        response: ModelResponse | None,
    ) -> End | None:
        """How the step loop ends on ``exc``: the end to write, None for a run that stays as
        journaled (paused, waiting); re-raises what is no end of the run (a shutdown, a bug)."""
        if isinstance(exc, Finish):
            return (exc.status, exc.reason, exc.error)
        if isinstance(exc, (Paused, Waiting)):
            return None
        if isinstance(exc, ModelReplyError):
            return ("failed", "invalid_reply", str(exc))
        if isinstance(exc, ModelError):
            return ("failed", "model_error", f"{type(exc).__name__}: {exc}")
        if isinstance(exc, (TypeError, AttributeError)):
            # A reply of the right class with fields of the wrong types (a custom model's
            # mistake: arguments as a dict, a call as a tuple) fails where the step first
            # reads them; checked here, on the error's path, not at every step.
            fault = malformed_reply(agent.model, response)
            if fault is None:
                raise exc  # not the reply's fault: a bug, as it is
            return ("failed", "model_error", f"ModelError: {fault}")
        if isinstance(exc, asyncio.CancelledError):
            return self._cancelled(state, deadline)  # re-raises on shutdown
        raise exc

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

    def _cancelled(self, state: RunState, deadline: float | None) -> End:
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

