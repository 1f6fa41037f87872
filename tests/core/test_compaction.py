"""Compaction keeps the context under budget, the user input and the last K turns verbatim."""

from __future__ import annotations

import pytest

from podium import Agent, ContextPolicy, Engine, FunctionModel, tool, tool_call_reply
from podium.context import SUMMARY_MARKER
from podium.messages import Message

pytestmark = pytest.mark.anyio

BUDGET = 700
KEEP = 2
STEPS = 12
USER_INPUT = "Collect the twelve readings and report them."


@tool
def reading(n: int) -> str:
    """Return reading number ``n`` with a long explanation.

    Args:
        n: Which reading.
    """
    return f"reading {n} = {n * 7}. " + "Details of the measurement conditions. " * 10


def make_agent(compaction: str, seen: list[list[Message]], summaries: list[str]) -> Agent:
    def reply(messages, request):  # type: ignore[no-untyped-def]
        if messages[0].content.startswith("Summarize the earlier steps"):
            summaries.append(messages[1].content)
            return "MODEL SUMMARY: readings so far are recorded."
        seen.append(list(messages))
        if request.step < STEPS:
            return tool_call_reply(("reading", f'{{"n": {request.step}}}'))
        return "all readings collected"

    return Agent(
        "t",
        FunctionModel(reply),
        tools=[reading],
        max_steps=STEPS + 2,
        context=ContextPolicy(
            max_context_tokens=BUDGET,
            keep_last_turns=KEEP,
            compaction=compaction,  # type: ignore[arg-type]
            summary_max_tokens=64,
            max_tool_result_tokens=200,
        ),
    )


def check_contexts(seen: list[list[Message]]) -> None:
    compacted = 0
    for step, messages in enumerate(seen):
        assert messages[0].role == "system"
        assert messages[1].role == "user" and messages[1].content == USER_INPUT
        assert sum(m.tokens for m in messages[1:]) <= BUDGET
        if any(m.content.startswith(SUMMARY_MARKER) for m in messages):
            compacted += 1
            assert messages[2].content.startswith(SUMMARY_MARKER)
        # The last K turns are verbatim: the tool results of the last K steps are all there.
        recent = [m.content for m in messages if m.role == "tool"]
        for n in range(max(0, step - KEEP), step):
            assert any(c.startswith(f"reading {n} = {n * 7}.") for c in recent), (step, n)
    assert compacted >= STEPS // 2


async def test_extractive_compaction() -> None:
    seen: list[list[Message]] = []
    summaries: list[str] = []
    async with Engine() as engine:
        record = await engine.run(make_agent("extractive", seen, summaries), USER_INPUT)
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed", record.error
    assert summaries == []
    check_contexts(seen)
    methods = {getattr(e, "method", None) for _, e in journal} - {None}
    assert methods == {"extractive"}
    last = seen[-1]
    assert "reading 0 = 0" in last[2].content  # the oldest turns' heads survive in the summary


async def test_model_compaction() -> None:
    seen: list[list[Message]] = []
    summaries: list[str] = []
    async with Engine() as engine:
        record = await engine.run(make_agent("model", seen, summaries), USER_INPUT)
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed", record.error
    assert summaries, "the model was never asked for a summary"
    assert "reading returned: reading 0 = 0" in summaries[0]
    check_contexts(seen)
    methods = {getattr(e, "method", None) for _, e in journal} - {None}
    assert methods == {"model"}
    assert "MODEL SUMMARY" in seen[-1][2].content


async def test_model_compaction_falls_back_to_extractive_on_model_error() -> None:
    from podium import ModelError

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if messages[0].content.startswith("Summarize the earlier steps"):
            raise ModelError("summarizer down")
        if request.step < STEPS:
            return tool_call_reply(("reading", f'{{"n": {request.step}}}'))
        return "done"

    agent = Agent(
        "t",
        FunctionModel(reply),
        tools=[reading],
        max_steps=STEPS + 2,
        context=ContextPolicy(
            max_context_tokens=BUDGET,
            keep_last_turns=KEEP,
            compaction="model",
            summary_max_tokens=64,
            max_tool_result_tokens=200,
        ),
    )
    async with Engine() as engine:
        record = await engine.run(agent, USER_INPUT)
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed"
    assert {getattr(e, "method", None) for _, e in journal} - {None} == {"extractive"}
