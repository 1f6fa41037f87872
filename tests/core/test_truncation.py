"""Long tool results are cut to their token budget, with a marker saying how much was cut."""

from __future__ import annotations

import pytest
from _helpers import tool_messages

from podium import Agent, ContextPolicy, EstimateTokenizer, FunctionModel, tool, tool_call_reply
from podium.context import truncate_text

pytestmark = pytest.mark.anyio

LONG = "lorem ipsum dolor sit amet " * 400  # ~2,700 estimated tokens


def test_truncate_text_keeps_short_text_and_marks_cuts() -> None:
    tok = EstimateTokenizer()
    assert truncate_text("short", 10, tok) == "short"
    cut = truncate_text(LONG, 50, tok)
    head, marker = cut.split("\n[… truncated: ", 1)
    assert LONG.startswith(head)
    assert tok.count(head) <= 50
    total = tok.count(LONG)
    assert marker.startswith(f"{total - 50} of {total} tokens cut")


@tool
def dump() -> str:
    """Return a very long text."""
    return LONG


@tool(max_result_tokens=10)
def tiny_dump() -> str:
    """Return a very long text, cut harder."""
    return LONG


async def test_long_tool_result_is_truncated_in_the_context() -> None:
    seen: list[str] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("dump", "{}"), ("tiny_dump", "{}"))
        seen.extend(m.content for m in tool_messages(messages))
        return "done"

    agent = Agent(
        "t",
        FunctionModel(reply),
        tools=[dump, tiny_dump],
        context=ContextPolicy(max_tool_result_tokens=100),
    )
    record = await agent.run("go")
    assert record.status == "completed"
    long_cut, tiny_cut = seen
    assert "[… truncated:" in long_cut and "[… truncated:" in tiny_cut
    tok = EstimateTokenizer()
    assert tok.count(long_cut.split("\n[…")[0]) <= 100
    assert tok.count(tiny_cut.split("\n[…")[0]) <= 10
    assert len(long_cut) < 600 and len(tiny_cut) < len(long_cut)
