"""Secret tool arguments and results never reach the journal, its events or observers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.records import JournalEntry
from podium.messages import Message
from podium.security.redact import redactor_for
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


@tool(secret_args=("password",))
def login(user: str, password: str) -> str:
    """Log in.

    Args:
        user: Who.
        password: Their password.
    """
    return f"welcome {user}" if password == "hunter2" else "denied"


@tool(secret_result=True, side_effects=True)
def get_token(scope: str) -> str:
    """Mint an API token.

    Args:
        scope: What it may do.
    """
    return f"tok-XYZ-{scope}"


@tool
def public(q: str) -> str:
    """Not secret.

    Args:
        q: A query.
    """
    return f"public {q}"


def _agent(calls: list[tuple[str, str]], seen: list[Message]) -> Agent:
    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step < len(calls):
            return tool_call_reply(calls[request.step])
        seen.extend(messages)
        return "all done"

    return Agent("secrets", FunctionModel(reply), tools=[login, get_token, public])


@pytest.mark.parametrize("together", [False, True])
async def test_secrets_are_redacted_in_the_journal_and_events(
    tmp_path: Path, together: bool
) -> None:
    calls = [
        ("login", '{"user": "ann", "password": "hunter2"}'),
        ("get_token", '{"scope": "read"}'),
        ("public", '{"q": "hello"}'),
    ]
    seen: list[Message] = []
    if together:  # one step with three calls: each outcome journaled as it finishes
        agent = _agent([], seen)

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(*calls)
            seen.extend(messages)
            return "all done"

        agent = Agent("secrets", FunctionModel(reply), tools=[login, get_token, public])
    else:
        agent = _agent(calls, seen)
    observed: list[JournalEntry] = []
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with store, Engine(store, observers=[lambda _, e: observed.append(e)]) as engine:
        record = await engine.run(agent, "go")
        journal = [e for _, e in await store.journal(record.run_id)]
    assert record.status == "completed"
    # The model read the real values while the run was live...
    live = " ".join(m.content + str(m.tool_calls) for m in seen)
    assert "hunter2" in live and "tok-XYZ-read" in live and "welcome ann" in live
    # ...and nothing written down holds them.
    written = msgspec.json.encode(journal).decode()
    events = msgspec.json.encode(observed).decode()
    for text in (written, events):
        assert "hunter2" not in text and "tok-XYZ" not in text
        assert "[secret]" in text and "[secret result: not journaled]" in text
        assert "welcome ann" in text and "public hello" in text
    logins = [
        c.arguments
        for e in journal
        for c in getattr(getattr(e, "message", None), "tool_calls", ())
        if c.name == "login"
    ]
    assert [msgspec.json.decode(a) for a in logins] == [{"user": "ann", "password": "[secret]"}]


async def test_agents_without_secrets_have_no_redactor() -> None:
    assert redactor_for(Agent("plain", FunctionModel(lambda m, r: "x"), tools=[public])) is None
    agent = Agent("s", FunctionModel(lambda m, r: "x"), tools=[login])
    assert redactor_for(agent) is redactor_for(agent) is not None
