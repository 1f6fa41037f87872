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


@tool(secret_args=("password",), requires_approval=True, side_effects=True)
def wire(account: str, password: str) -> str:
    """Wire money (a human approves each one).

    Args:
        account: Where to.
        password: The signing password.
    """
    return f"wired to {account}"


@tool(secret_args=("password",))
def login_fails(user: str, password: str) -> str:
    """Log in, and fail quoting what it was given (as many libraries do).

    Args:
        user: Who.
        password: Their password.
    """
    raise ValueError(f"bad credentials {user}:{password}")


async def test_a_call_waiting_for_approval_is_journaled_and_listed_without_its_secrets(
    tmp_path: Path,
) -> None:
    """The ``approval`` entry, the SSE events made from it and the pending-approvals listing
    held the secret argument verbatim (found from the outside)."""
    calls = [("wire", '{"account": "ACME", "password": "hunter2-TOPSECRET"}')]
    agent = Agent("wires", FunctionModel(
        lambda m, r: tool_call_reply(*calls) if r.step == 0 else "sent"), tools=[wire])
    observed: list[JournalEntry] = []
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with store, Engine(store, observers=[lambda _, e: observed.append(e)]) as engine:
        record = await engine.run(agent, "pay ACME")
        assert record.status == "waiting"
        pending = await engine.pending_approvals(record.run_id)
        journal = [e for _, e in await store.journal(record.run_id)]
    assert [msgspec.json.decode(p.arguments) for p in pending] == [
        {"account": "ACME", "password": "[secret]"}
    ]
    for text in (msgspec.json.encode(journal).decode(), msgspec.json.encode(observed).decode()):
        assert "hunter2" not in text and "ACME" in text


async def test_a_tools_error_quoting_a_secret_argument_does_not_carry_it() -> None:
    calls = [("login_fails", '{"user": "bob", "password": "hunter2-TOPSECRET"}')]
    seen: list[Message] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(*calls)
        seen.extend(messages)
        return "gave up"

    agent = Agent("fails", FunctionModel(reply), tools=[login_fails])
    async with Engine() as engine:
        record = await engine.run(agent, "log in")
        journal = [e for _, e in await engine.store.journal(record.run_id)]
    errors = [m.content for m in seen if m.role == "tool"]
    assert errors == ["error: tool 'login_fails' failed: ValueError: bad credentials bob:[secret]"]
    assert "hunter2" not in msgspec.json.encode(journal).decode()


async def test_a_compaction_summary_quotes_the_context_without_its_secrets() -> None:
    """The ``compact`` entry's summary quoted the live context: secret arguments and secret
    results verbatim in the journal and the events (found from the outside)."""
    from podium import ContextPolicy

    calls = [("login", '{"user": "ann", "password": "hunter2"}'), ("get_token", '{"scope": "r"}')]
    steps = [calls[i % 2] for i in range(8)]

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        return tool_call_reply(steps[request.step]) if request.step < len(steps) else "done"

    agent = Agent("compacting", FunctionModel(reply), "x" * 400, tools=[login, get_token],
                  context=ContextPolicy(max_context_tokens=400, keep_last_turns=1,
                                        summary_max_tokens=60, max_tool_result_tokens=80))
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        journal = [e for _, e in await engine.store.journal(record.run_id)]
    summaries = [e.summary.content for e in journal if type(e).__name__ == "Compacted"]
    assert record.status == "completed" and summaries, record
    text = msgspec.json.encode(journal).decode()
    assert "hunter2" not in text and "tok-XYZ" not in text
    assert any("[secret]" in s for s in summaries)
