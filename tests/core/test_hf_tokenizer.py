"""HuggingFaceTokenizer counts and truncates exactly, from a tokenizer.json built here."""

from __future__ import annotations

from pathlib import Path

import pytest

from podium import Agent, ContextPolicy, FunctionModel, HuggingFaceTokenizer, tool, tool_call_reply

tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "the agent calls the tool and reads the result",
    "the model answers the user with the result",
    "podium runs many agents on few cpus",
]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_counts_words(tokenizer_file: Path) -> None:
    tok = HuggingFaceTokenizer.from_file(tokenizer_file)
    assert tok.name == "tokenizer.json"
    assert tok.count("") == 0
    assert tok.count("the agent calls the tool") == 5
    assert tok.count("unknown words still count") == 4  # each becomes [UNK]


def test_truncates_on_token_boundaries(tokenizer_file: Path) -> None:
    tok = HuggingFaceTokenizer.from_file(tokenizer_file)
    text = "the model answers the user with the result"
    assert tok.truncate(text, 3) == "the model answers"
    assert tok.truncate(text, 100) == text
    assert tok.truncate(text, 0) == ""
    assert tok.count(tok.truncate(text, 5)) == 5


@tool
def verbose() -> str:
    """Return many words."""
    return " ".join(["the result"] * 100)


@pytest.mark.anyio
async def test_agent_truncates_tool_results_with_the_hf_tokenizer(tokenizer_file: Path) -> None:
    tok = HuggingFaceTokenizer.from_file(tokenizer_file)
    seen: list[str] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("verbose", "{}"))
        seen.append(messages[-1].content)
        return "done"

    agent = Agent(
        "t",
        FunctionModel(reply),
        tools=[verbose],
        context=ContextPolicy(max_tool_result_tokens=7, tokenizer=tok),
    )
    assert (await agent.run("go")).status == "completed"
    head, marker = seen[0].split("\n", 1)
    assert head == "the result the result the result the"
    assert "193 of 200 tokens cut" in marker
