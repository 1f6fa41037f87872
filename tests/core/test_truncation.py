"""Long tool results are cut to their token budget, with a marker saying how much was cut."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _helpers import tool_messages

from podium import Agent, ContextPolicy, EstimateTokenizer, FunctionModel, tool, tool_call_reply
from podium.context import Tokenizer, truncate_text
from podium.messages import Message
from podium.models.base import ModelRequest

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


class WordTokenizer(Tokenizer):
    """A word a token; remembers every text it counts."""

    name = "words"

    def __init__(self) -> None:
        self.counted: list[str] = []

    def count(self, text: str) -> int:
        self.counted.append(text)
        return len(text.split())


class TemplateTokenizer(WordTokenizer):
    """Counts messages its own way (a chat template with a role header)."""

    name = "template"

    def count_message(self, message: Message) -> int:
        return 7 + len(message.role) + super().count_message(message)


@tool
def fetch(size: int) -> str:
    """Return ``size`` words.

    Args:
        size: How many.
    """
    return "word " * size


@pytest.mark.parametrize("tokenizer", [EstimateTokenizer(), WordTokenizer(), TemplateTokenizer()])
async def test_one_call_steps_count_their_result_as_the_context_counts_it(
    tokenizer: Tokenizer,
) -> None:
    """Steps of one call (the fast lane) count a result once for its budget and its
    message: what the model is told the prompt holds is the tokenizer's own count of
    every message, whether the result was cut or not, and for a tokenizer with a chat
    template of its own."""
    told: list[int] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        history = sum(tokenizer.count_message(m) for m in messages[1:])
        told.append(request.prompt_tokens - request.prefix_tokens - history)
        if request.step < 3:
            size = (5, 2_000, 40)[request.step]  # the second is over the budget
            return tool_call_reply(("fetch", f'{{"size": {size}}}'))
        return "done"

    agent = Agent(
        "t",
        FunctionModel(reply),
        tools=[fetch],
        context=ContextPolicy(max_tool_result_tokens=100, tokenizer=tokenizer),
    )
    record = await agent.run("go")
    assert record.status == "completed"
    assert told == [0, 0, 0, 0]


async def test_a_result_within_budget_is_counted_once() -> None:
    tokenizer = WordTokenizer()

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("fetch", '{"size": 12}'))
        return "done"

    agent = Agent(
        "t", FunctionModel(reply), tools=[fetch], context=ContextPolicy(tokenizer=tokenizer)
    )
    assert (await agent.run("go")).status == "completed"
    assert tokenizer.counted.count("word " * 12) == 1


def unaccounted(request: ModelRequest, messages: Sequence[Message], tokenizer: Tokenizer) -> int:
    """What the prompt the model is told of holds beyond the tokenizer's own count of
    every message in it (0 when the context counts as the tokenizer does)."""
    history = sum(tokenizer.count_message(m) for m in messages[1:])
    return request.prompt_tokens - request.prefix_tokens - history


class ScaledEstimate(EstimateTokenizer):
    """An estimate whose count says more than its inherited count_message (which reads
    lengths, not count): the two disagree, so a message must be counted as a message."""

    name = "scaled"

    def count(self, text: str) -> int:
        return 10 * super().count(text)


class ByteTokenizer(Tokenizer):
    """A token a UTF-8 byte (byte-level BPE's worst case: an emoji is four)."""

    name = "bytes"

    def count(self, text: str) -> int:
        return len(text.encode())


@pytest.mark.parametrize("kind", [ScaledEstimate, ByteTokenizer])
async def test_the_context_counts_a_one_call_steps_result_as_its_tokenizer_does(
    kind: type[Tokenizer],
) -> None:
    tokenizer = kind()
    told: list[int] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        told.append(unaccounted(request, messages, tokenizer))
        if request.step == 0:
            return tool_call_reply(("fetch", '{"size": 25}'))
        return "done"

    agent = Agent(
        "t", FunctionModel(reply), tools=[fetch], context=ContextPolicy(tokenizer=tokenizer)
    )
    assert (await agent.run("go")).status == "completed"
    assert told == [0, 0]


async def test_after_a_hand_off_the_context_keeps_counting_with_its_own_tokenizer() -> None:
    """The target agent's tokenizer cuts its results; the context (the run's, started by
    the first agent) counts what enters it, fast lane or not."""
    context_tokenizer = WordTokenizer()
    told: list[int] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        told.append(unaccounted(request, messages, context_tokenizer))
        if request.step == 1:
            return tool_call_reply(("fetch", '{"size": 50}'))
        return "done"

    target = Agent(
        "b", FunctionModel(reply), tools=[fetch],
        context=ContextPolicy(tokenizer=EstimateTokenizer()),
    )
    front = Agent(
        "a", FunctionModel(lambda m, r: tool_call_reply(("transfer_to_b", "{}"))),
        handoffs=[target], context=ContextPolicy(tokenizer=context_tokenizer),
    )
    record = await front.run("go")
    assert record.status == "completed" and record.active_agent == "b"
    assert told == [0, 0]


async def test_a_rejected_calls_arguments_are_cut_by_their_count_not_their_length() -> None:
    """A call to an unknown tool with 1,000 emoji (4,000 tokens for a byte-level tokenizer,
    1,000 characters) is cut to the 2,000-token budget in the context and the journal."""
    tokenizer = ByteTokenizer()
    kept: list[str] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("nope", "🙂" * 1_000))
        (turn,) = [m for m in messages if m.role == "assistant"]
        kept.append(turn.tool_calls[0].arguments)
        return "done"

    agent = Agent(
        "t", FunctionModel(reply), tools=[fetch],
        context=ContextPolicy(tokenizer=tokenizer, max_tool_result_tokens=2_000),
    )
    assert (await agent.run("go")).status == "completed"
    (arguments,) = kept
    head = arguments.split("\n[… truncated: ")[0]
    assert "truncated" in arguments and tokenizer.count(head) <= 2_000
