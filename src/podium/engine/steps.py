"""The steps off the step loop's fast lane: the final answer (journaled with the run's
end in one write), a structured answer and its retries, a step with several calls,
side effects, approvals, rejected calls, screening or an allow-list, and a step
resumed after a crash or after humans decided.
"""

from __future__ import annotations

import time

import msgspec

from podium.agent import Agent
from podium.engine import approvals
from podium.engine.base import CHECKPOINT, MERGE, NO_CALLS, PARSE, TOOLS, Finish, blocked, by_index
from podium.engine.calls import Calls
from podium.engine.output_step import OutputVerdict, judge_reply, plan_output_calls
from podium.engine.profile import StepProfile
from podium.engine.records import (
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.engine.replay import RunState
from podium.engine.step import PlannedCall, over_cap, plan_tool_calls, tool_message
from podium.engine.stopwatch import Stopwatch
from podium.messages import Message
from podium.models.base import ModelResponse
from podium.security.allowlist import restrict_calls
from podium.security.output_guard import remember_flagged
from podium.security.screen import Screened, ScreenVerdict
from podium.tools.executor import ToolResult


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


class Steps(Calls):

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
        screening = agent.screening
        if (self.store.keeps_entries and state.redact is None and not self.observers
                and (screening is None or screening.outputs is None)):
            # A store that keeps the entries as given (memory), nothing to screen: the step
            # is journaled with the run's end, then its profile made, closed and given to
            # the entry at once (one stopwatch call: the record and journal hold it).
            final = self._apply_final(state, RunFinished(
                time.time(), "completed", output=response.content if output is None else output,
                structured=output is not None,
            ))
            entry = StepRecord(step, final.ts, message, (), response.usage, None)
            self._tasks.pop(state.record.run_id, None)  # its end is decided: too late a cancel
            if state.alarm is not None:  # and so is its deadline
                state.alarm.disarm()
            if not self.store.append_nowait(state.record.run_id, (entry, final),
                                            record=state.record):
                await self._append(state, (entry, final), sw, record=state.record)
            entry.profile = profile = sw.close_final(step, ttft)
        else:
            profile = await self._final_written(agent, state, sw, message, response, step,
                                                ttft, output)
        on_step = state.on_step
        if on_step is not None:
            if profile is None:  # Engine(profile=False): the hook still hears of the step
                profile = StepProfile(step, (), (), 0, ttft)
            on_step(agent, state.record, profile, state, ())

    async def _final_written(
        self,
        agent: Agent,
        state: RunState,
        sw: Stopwatch,
        message: Message,
        response: ModelResponse,
        step: int,
        ttft: int,
        output: str | None,
    ) -> StepProfile | None:
        """:meth:`_final_step` for a store that copies or redacts, observers to show the
        entries, or an answer to screen: the profile made before the write, closed after."""
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
                    raise Finish("failed", "output_blocked", blocked(verdict))
                if output is not None:
                    if text != output:  # the journaled reply carries what leaves, too
                        message = _left(state, _with_answer(agent, message, text))
                    output = text
                elif text != response.content:  # what leaves the run is what the screen left
                    response.content = text
                    message = _left(state, msgspec.structs.replace(message, content=text))
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
        return profile

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
            sw.lap(PARSE)
            await self._final_step(agent, state, sw, message, response, ttft, verdict.output)
            return True
        feedback = verdict.feedback
        if feedback is not None:  # no tool calls, no valid answer: the model reads why
            ctx.append(message)
            ctx.append(feedback)
            sw.lap(PARSE)
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
        sw.lap(PARSE)
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
            raise Finish(
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
            sw.lap(CHECKPOINT)
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
        held = NO_CALLS
        if agent.gated:  # some calls may need a human's approval first
            planned, held = approvals.gate(planned, state.approved)
        # tools
        interrupts = self.executor.interrupts
        if len(planned) == 1 and not done:
            results = [await self._run_one(agent, state, planned[0], sw)]
        else:
            results = await self._run_tools(agent, state, planned, done, sw)
        sw.lap(TOOLS)
        if held or self.executor.interrupts != interrupts:
            await self._park(
                agent, state, planned, held, rejected, results, done, deferred, sw, ttft
            )
        # merge
        if rejected:
            outcomes = [*rejected, *results]
            outcomes.sort(key=by_index)
        elif done:  # a resumed step: the outcomes known before it come first in `results`
            outcomes = sorted(results, key=by_index)
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
        sw.lap(MERGE)
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
                    raise Finish("failed", "injection_blocked", blocked(result.screen))
        if state.invalid_calls > agent.max_invalid_tool_calls:
            raise Finish(
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


def _left(state: RunState, message: Message) -> Message:
    """``message``, the answer as the output screen let it leave, put in place of the
    reply the context holds (what a thread keeps for its next run, which must not hold
    what was withheld)."""
    messages = state.ctx.messages
    if messages and messages[-1].role == "assistant":
        message.tokens = messages[-1].tokens
        messages[-1] = message
    return message
