"""Sans-I/O step logic of agents with an ``output_type``: is this reply the answer?

A reply is judged once, in the parse phase: its answer (the content, or the arguments
of a ``final_result`` call in tool mode) is decoded and validated in one pass. A valid
one ends the run; a reply without tool calls that fails becomes feedback the model
reads (the error and the schema); an invalid ``final_result`` call among other calls
becomes that call's error observation while the other calls run as usual. Each failed
attempt counts against the agent's ``output_retries``.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from podium.agent import Agent
from podium.engine.step import PlannedCall, over_cap, plan_tool_calls, truncate_result
from podium.messages import Message, ToolCall
from podium.output import OUTPUT_ERRORS, OutputSpec
from podium.tools.executor import ToolResult

__all__ = ("OutputVerdict", "judge_reply", "plan_output_calls")


class OutputVerdict(msgspec.Struct, gc=False):
    """What a reply means for an agent with an output type.

    - ``output`` set: the answer, as canonical JSON; the run is done.
    - ``feedback`` set: a reply without tool calls that failed; the model reads this next.
    - ``rejected`` set: the observation for the invalid ``final_result`` call at
      ``index`` (tool mode); the reply's other calls run.
    - nothing set: the reply only calls tools, an ordinary step.
    """

    output: str | None = None
    feedback: Message | None = None
    index: int = -1
    rejected: ToolResult | None = None
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.feedback is not None or self.rejected is not None


_TOOLS_ONLY = OutputVerdict()


def judge_reply(spec: OutputSpec, message: Message) -> OutputVerdict:
    """Decode and validate the answer in ``message`` (one pass), or say what went wrong."""
    calls = message.tool_calls
    if spec.mode == "tool":
        name = spec.tool_name
        for index, call in enumerate(calls):
            if call.name == name:  # the first final_result call is the answer
                try:
                    return OutputVerdict(output=spec.validate(call.arguments))
                except OUTPUT_ERRORS as exc:
                    result = ToolResult(
                        call.id, name, spec.tool_feedback(exc), ok=False,
                        error="invalid_output", attempts=0,
                    )
                    return OutputVerdict(index=index, rejected=result, error=spec.error_text(exc))
    if calls:
        return _TOOLS_ONLY
    try:
        return OutputVerdict(output=spec.validate(message.content))
    except OUTPUT_ERRORS as exc:
        return OutputVerdict(
            feedback=Message("user", spec.feedback(exc)), error=spec.error_text(exc)
        )


def plan_output_calls(
    agent: Agent, run_id: str, step: int, calls: Sequence[ToolCall], verdict: OutputVerdict
) -> tuple[list[PlannedCall], list[tuple[int, ToolResult]], tuple[ToolCall, ...] | None, int]:
    """:func:`plan_tool_calls` with an invalid ``final_result`` call's observation in place
    of "unknown tool"; the last item is how many calls count as invalid tool calls."""
    planned, rejected, cut = plan_tool_calls(agent, run_id, step, calls)
    invalid = len(rejected) - over_cap(agent, calls)
    result = verdict.rejected
    if result is not None:
        index = verdict.index
        result = truncate_result(agent, None, result)
        rejected = [
            (i, msgspec.structs.replace(result, call_id=r.call_id) if i == index else r)
            for i, r in rejected
        ]
        if index < agent.max_tool_calls:  # it was counted as an unknown tool
            invalid -= 1
    return planned, rejected, cut, invalid
