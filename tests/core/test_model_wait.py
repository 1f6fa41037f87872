"""The step loop's model call (``first_slice`` and ``_wait_model``): a model that answers
at once and one that waits take the same path to the same run; a reply the model could not
make sense of after a wait is asked for again; the model's own GeneratorExit is its fault.
The fast lane's reply enters the context counted as the tokenizer counts its message."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from podium import Agent, Engine, FunctionModel, Message, ModelRequest, tool, tool_call_reply
from podium.context.tokenizers import EstimateTokenizer, Tokenizer
from podium.errors import ModelReplyError
from podium.messages import ToolCall
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"{query}: found"


def agent_with(wait: bool, fail_once: type[BaseException] | None = None) -> Agent:
    failed = False

    async def reply(messages: Sequence[Message], request: ModelRequest) -> object:
        nonlocal failed
        if wait:
            await asyncio.sleep(0)
        if fail_once is not None and not failed:
            failed = True
            raise fail_once("no sense in it")
        if request.step < 3:
            return tool_call_reply(("lookup", '{"query": "podium"}'), content="let me look")
        return "done"

    return Agent("a", FunctionModel(reply), "Be terse.", [lookup], max_steps=8, model_retries=1)


@pytest.mark.parametrize("wait", [False, True], ids=["at-once", "waits"])
async def test_a_model_that_waits_makes_the_same_run_as_one_that_answers_at_once(
    wait: bool,
) -> None:
    async with Engine(MemoryRunStore()) as engine:
        record = await engine.run(agent_with(wait), "go")
    assert (record.status, record.output, record.steps) == ("completed", "done", 4)


@pytest.mark.parametrize("wait", [False, True], ids=["at-once", "waits"])
async def test_a_bad_reply_is_asked_for_again_after_a_wait_too(wait: bool) -> None:
    async with Engine(MemoryRunStore()) as engine:
        record = await engine.run(agent_with(wait, ModelReplyError), "go")
    assert (record.status, record.output) == ("completed", "done")


@pytest.mark.parametrize("wait", [False, True], ids=["at-once", "waits"])
async def test_the_models_own_generator_exit_fails_the_run_as_its_fault(wait: bool) -> None:
    async with Engine(MemoryRunStore()) as engine:
        record = await engine.run(agent_with(wait, GeneratorExit), "go")
    assert (record.status, record.reason) == ("failed", "model_error")
    assert "GeneratorExit" in (record.error or "")


class Words(Tokenizer):
    """A tokenizer that counts messages its own way (roles and reasoning too)."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        calls = sum(self.count(c.arguments) + 1 for c in message.tool_calls)
        return 2 + self.count(message.content) + self.count(message.reasoning) + calls


@pytest.mark.parametrize("tokenizer", [EstimateTokenizer(), EstimateTokenizer(3.0), Words()])
def test_a_reply_counted_by_its_parts_counts_as_its_message(tokenizer: Tokenizer) -> None:
    calls = (ToolCall("c1", "lookup", '{"query": "podium podium"}'), ToolCall("c2", "x", ""))
    for content, tool_calls, reasoning in [
        ("", calls, ""), ("some words here", calls[:1], "I think so"), ("answer", (), ""),
    ]:
        message = Message("assistant", content, tool_calls, reasoning=reasoning)
        counted = tokenizer.count_reply(content, tool_calls, reasoning)
        assert counted == tokenizer.count_message(message)


async def test_the_context_counts_each_fast_lane_step_as_its_messages() -> None:
    agent = agent_with(False)
    async with Engine(MemoryRunStore()) as engine:
        record = await engine.run(agent, "go")
        journal = [e for _, e in await engine.store.journal(record.run_id)]
    replies = [e.message for e in journal if hasattr(e, "message") and e.message is not None]
    assert len(replies) == 4
    tokenizer = agent.context.tokenizer
    for reply in replies:  # journaled with the tokens the context counted them with
        assert reply.tokens == tokenizer.count_message(reply)
