"""Keeping the prompt within its budget: compaction (extractive, or summarized by the
model), journaled so a resume replays the same context; a thread's history or a
hand-off's filtered history fitted before the first call that needs it.
"""

from __future__ import annotations

import time

from podium.agent import Agent
from podium.context.tokenizers import MESSAGE_OVERHEAD_TOKENS
from podium.engine.base import MERGE, Finish, eager
from podium.engine.handoff import HandoffFilterError, filtered, switch
from podium.engine.model_faults import model_fault
from podium.engine.records import Compacted
from podium.engine.replay import RunState
from podium.engine.stopwatch import NoStopwatch, Stopwatch
from podium.engine.waits import Waits
from podium.errors import ModelError
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.security.redact import RunRedactor
from podium.tools.agent_tool import HandoffTool

_SUMMARIZE_PROMPT = (
    "Summarize the earlier steps of this agent's work below so it can continue without them. "
    "Keep facts, numbers, ids and open questions; drop pleasantries. Be brief."
)


class Compaction(Waits):

    async def _fit_history(self, agent: Agent, state: RunState) -> None:
        """A thread's history with the new input over budget: compact before the first call
        (journaled, so a resume replays the same context)."""
        if state.ctx.tokens > agent.context.max_context_tokens:
            compaction = await self._compact(agent, state, NoStopwatch.start(self._cpu))
            if compaction is not None:
                await self._append(state, (compaction,))

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
            raise Finish(
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
                raise Finish("failed", "handoff_filter", str(exc)) from exc
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
                response, _ = await eager(agent.model.request(request), sw, MERGE)
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
