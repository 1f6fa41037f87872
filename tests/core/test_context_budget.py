"""No prompt a model receives is over ``max_context_tokens``, whatever the conversation,
the budget, the compaction settings and the tokenizer; a policy that cannot hold what a
compacted prompt keeps is refused when it is made."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podium import (
    Agent,
    ConfigError,
    ContextPolicy,
    Engine,
    FunctionModel,
    HuggingFaceTokenizer,
    ModelRequest,
    ModelResponse,
    tool,
    tool_call_reply,
)
from podium.context import SUMMARY_MARKER
from podium.context.tokenizers import EstimateTokenizer, Tokenizer
from podium.messages import Message

WORDS = [
    "the", "agent", "calls", "a", "tool,", "reads", "42", "results;", "naïve", "café", "東京",
    "data", "✓", "ok",
]


def text_of(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(n_words))


@functools.cache
def byte_level_tokenizer() -> HuggingFaceTokenizer:
    """A byte-level BPE (GPT-2's scheme) trained here, offline, on a tiny corpus: many
    tokens a word, several a character for the non-ASCII ones."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text_of(40, s) for s in range(20)], trainer)
    return HuggingFaceTokenizer(tok, name="byte-level")


TOKENIZERS: dict[str, Any] = {
    "estimate": EstimateTokenizer,
    "estimate-2.5": lambda: EstimateTokenizer(2.5),
    "byte-level": byte_level_tokenizer,
}


@tool
def fetch(n: int, words: int) -> str:
    """Return ``words`` words of data.

    Args:
        n: Which item.
        words: How long the result is.
    """
    return text_of(words, n)


def prompt_tokens(tokenizer: Tokenizer, request: ModelRequest) -> int:
    """The prompt's tokens counted afresh, as the prefix and the context count them."""
    schemas = sum(tokenizer.count(msgspec.json.encode(t).decode()) for t in request.tools)
    return schemas + sum(tokenizer.count_message(Message(m.role, m.content, m.tool_calls))
                         for m in request.messages)


Step = list[int]  # the result sizes (in words) of one reply's tool calls; [] ends the run

conversations = st.lists(  # turns of a thread: (input words, steps)
    st.tuples(
        st.integers(1, 300),
        st.lists(st.lists(st.integers(0, 400), min_size=1, max_size=3), max_size=6),
    ),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large
    ],
)
@given(
    conversation=conversations,
    tokenizer_name=st.sampled_from(sorted(TOKENIZERS)),
    slack=st.integers(-100, 2000),  # the budget beyond the summary and one result
    keep=st.integers(1, 4),
    summary_max=st.integers(1, 400),
    result_max=st.integers(10, 600),
    compaction=st.sampled_from(["extractive", "model"]),
    summary_words=st.integers(0, 800),
    reply_words=st.integers(0, 120),
)
@pytest.mark.anyio
async def test_no_prompt_is_over_the_budget(
    conversation: list[tuple[int, list[Step]]],
    tokenizer_name: str,
    slack: int,
    keep: int,
    summary_max: int,
    result_max: int,
    compaction: str,
    summary_words: int,
    reply_words: int,
) -> None:
    tokenizer: Tokenizer = TOKENIZERS[tokenizer_name]()
    budget = max(1, 150 + summary_max + result_max + slack)
    sent: list[int] = []
    steps_of_turn: list[list[Step]] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        sent.append(prompt_tokens(tokenizer, request))
        if messages[0].content.startswith("Summarize"):  # a summarizer that says too much
            return text_of(summary_words, 3)
        steps = steps_of_turn[-1]
        if request.step < len(steps):
            calls = [("fetch", {"n": i, "words": w}) for i, w in enumerate(steps[request.step])]
            return tool_call_reply(*calls, content=text_of(reply_words, request.step))
        return text_of(reply_words, 1)

    try:
        agent = Agent(
            "a",
            FunctionModel(reply),
            "You fetch data.",
            [fetch],
            max_steps=8,
            context=ContextPolicy(
                max_context_tokens=budget,
                keep_last_turns=keep,
                summary_max_tokens=summary_max,
                max_tool_result_tokens=result_max,
                compaction=compaction,  # type: ignore[arg-type]
                tokenizer=tokenizer,
            ),
        )
    except ConfigError:  # refused as it is made: checked by the tests below
        event("policy refused")
        return
    async with Engine() as engine:
        for input_words, steps in conversation:
            steps_of_turn.append(steps)
            user_input = text_of(input_words, 5)
            record = await engine.run(agent, user_input, thread_id="t")
            assert max(sent, default=0) <= budget, (sent, budget)
            event(f"run {record.status}")
            if record.status != "completed":
                assert record.reason == "context_overflow", record
                # Only where something that must stay verbatim cannot fit.
                assert not surely_fits(agent, user_input, steps), record.error
                break


def surely_fits(agent: Agent, user_input: str, steps: list[Step]) -> bool:
    """Whether every prompt of the run fits with the input and any one turn verbatim and a
    shortest summary: then the run must not fail for its context."""
    policy = agent.context
    tok = policy.tokenizer
    summary = tok.count_message(Message("user", f"{SUMMARY_MARKER}\n"))
    floor = agent.prefix.tokens + summary + min(16, policy.summary_max_tokens)
    floor += tok.count_message(Message("user", user_input))
    if floor > policy.max_context_tokens:  # (the input with a summary, no turn at all)
        return False
    for step in steps:
        calls = tool_call_reply(*[("fetch", {"n": i, "words": w}) for i, w in enumerate(step)])
        turn = tok.count_message(Message("assistant", "x" * 1000, calls.tool_calls))
        for i, words in enumerate(step):
            result = text_of(words, i)
            turn += tok.count_message(Message("tool", result))
        if floor + turn > policy.max_context_tokens:
            return False
    return True


def test_a_summary_larger_than_the_budget_is_refused() -> None:
    """The issue's case: the default summary_max_tokens=512 with a 400-token budget."""
    with pytest.raises(ConfigError, match="summary_max_tokens=512 does not fit"):
        ContextPolicy(max_context_tokens=400)


def test_a_budget_without_room_for_a_tool_result_is_refused() -> None:
    policy = ContextPolicy(max_context_tokens=700, summary_max_tokens=100)
    with pytest.raises(ConfigError, match=r"agent 'a': max_context_tokens=700 cannot hold"):
        Agent("a", FunctionModel(lambda m, r: "ok"), tools=[fetch], context=policy)
    Agent("a", FunctionModel(lambda m, r: "ok"), context=policy)  # no tools: it fits
    small_results = ContextPolicy(
        max_context_tokens=700, summary_max_tokens=100, max_tool_result_tokens=300
    )
    Agent("a", FunctionModel(lambda m, r: "ok"), tools=[fetch], context=small_results)


@pytest.mark.anyio
async def test_an_input_that_cannot_fit_fails_the_run_without_a_model_call() -> None:
    calls: list[int] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> str:
        calls.append(request.prompt_tokens)
        return "ok"

    policy = ContextPolicy(max_context_tokens=300, summary_max_tokens=50)
    agent = Agent("a", FunctionModel(reply), context=policy)
    record = await agent.run("word " * 400)
    assert (record.status, record.reason) == ("failed", "context_overflow")
    assert "max_context_tokens=300" in (record.error or "")
    assert calls == []


@pytest.mark.anyio
async def test_the_default_policy_at_a_small_budget_keeps_every_prompt_in_it() -> None:
    """The issue's measurement: a thread at 600 tokens with the default policy (41 of 50
    prompts were over it); the summary of the earlier turns is in the last prompt."""
    budget = 600
    sent: list[int] = []
    last: list[Message] = []
    tok = EstimateTokenizer()

    def reply(messages: Sequence[Message], request: ModelRequest) -> str:
        sent.append(prompt_tokens(tok, request))
        last[:] = messages
        return "Answer: " + "a fairly long explanation of the matter at hand. " * 6

    policy = ContextPolicy(max_context_tokens=budget)
    agent = Agent("chatty", FunctionModel(reply), "You talk a lot.", context=policy)
    async with Engine() as engine:
        for i in range(50):
            record = await engine.run(agent, f"Question {i}: " + "tell me more. " * 8,
                                      thread_id="t")
            assert record.status == "completed", record
    assert len(sent) == 50 and max(sent) <= budget, sent
    assert last[1].content.startswith(SUMMARY_MARKER)
    assert last[-1].content.startswith("Question 49:")


@pytest.mark.parametrize("limit", range(1, 40))
def test_a_byte_level_cut_never_counts_more_than_asked(limit: int) -> None:
    """A character split over several byte-level tokens is not cut into, and a cut that
    re-encodes differently is shortened until it fits."""
    tok = byte_level_tokenizer()
    text = "ok 日本語🙂 data " * 20  # characters the vocabulary never saw: bytes
    head = tok.truncate(text, limit)
    assert tok.count(head) <= limit and text.startswith(head)
    assert tok.count(head) >= limit - 4  # cut at the budget, not far short of it
