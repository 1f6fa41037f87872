"""Secrets smuggled through every path of a served run: a tool that echoes its secret
argument in a successful result, a model that repeats a declared key and the password in
its reasoning and answer (upper-cased, reversed, spaced, base64), streamed a few
characters a delta. None of it reaches the SSE stream, the run's record or the journal,
on each store (memory, SQLite, Redis)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import gateway_client
from podium import Agent, tool
from podium.gateway.service import ServedAgent
from podium.messages import ToolCall
from podium.models.base import Model, ModelRequest, ModelResponse, StreamDelta
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore
from redis_fixtures import redis_reachable

pytestmark = pytest.mark.anyio

KEY = "sk-live-9f8E7d6C5b4A3z"  # declared: the agent's own API key
PASSWORD = "Hunter2-Correct-Horse"  # learnt: a secret argument of `login`


@tool(secret_args=("password",))
def login(user: str, password: str) -> str:
    """Log in (and, like many services, say what was given).

    Args:
        user: Who.
        password: Their password.
    """
    return f"welcome {user}; you logged in with {password} (key {KEY.upper()})"


class LeakyModel(Model):
    """Calls ``login``, then answers with both secrets in several forms, in its
    reasoning and its text, streamed ``chunk`` characters a delta."""

    name = "leaky"

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def _reply(self, request: ModelRequest) -> ModelResponse:
        if request.step == 0:
            args = json.dumps({"user": "ann", "password": PASSWORD})
            call = ToolCall("c1", "login", args)
            return ModelResponse(
                content=f"Logging in with key {KEY}", tool_calls=(call,),
                finish_reason="tool_calls",
            )
        b64 = base64.b64encode(f"pw={PASSWORD}".encode()).decode()
        return ModelResponse(
            content=(
                f"Done. Password {PASSWORD.upper()}, backwards {PASSWORD[::-1]}, "
                f"spelled {' '.join(KEY)}, encoded {b64}."
            ),
            reasoning=f"the key is {KEY.lower()} and the password {PASSWORD}",
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        return self._reply(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:  # type: ignore[override]
        reply = self._reply(request)
        n = self.chunk
        for i in range(0, len(reply.reasoning), n):
            yield StreamDelta(reasoning=reply.reasoning[i : i + n])
        for i in range(0, len(reply.content), n):
            yield StreamDelta(content=reply.content[i : i + n])
        for i, call in enumerate(reply.tool_calls):
            yield StreamDelta(tool_call_index=i, tool_call_id=call.id, tool_name=call.name)
            yield StreamDelta(tool_call_index=i, arguments=call.arguments)
        yield StreamDelta(response=reply)


def leaky(chunk: int) -> Agent:
    return Agent("leaky", LeakyModel(chunk), "You log in.", [login], secrets=[KEY])


def _in_clear(text: str) -> list[str]:
    """The forms of either secret ``text`` shows."""
    squeezed = "".join(text.lower().split())
    found = []
    for secret in (KEY, PASSWORD):
        s = secret.lower()
        if s in squeezed or s[::-1] in squeezed:
            found.append(secret)
    if base64.b64encode(f"pw={PASSWORD}".encode()).decode()[4:20] in text:
        found.append("base64")
    return found


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    if request.param == "memory":
        yield MemoryRunStore()
    elif request.param == "sqlite":
        yield SQLiteRunStore(tmp_path / "runs.sqlite")
    else:
        if not redis_reachable():
            pytest.skip("no Redis on 127.0.0.1:6379")
        from podium.store.redis import RedisRunStore

        prefix = request.getfixturevalue("prefix")
        yield RedisRunStore(request.getfixturevalue("redis_url"), prefix=prefix)


@pytest.mark.parametrize("chunk", [1, 3, 64])
async def test_no_secret_reaches_the_stream_the_record_or_the_journal(
    store: RunStore, chunk: int
) -> None:
    async with gateway_client(agents=[ServedAgent(leaky(chunk))], store=store) as (_, client):
        body = {"agent": "leaky", "input": "log ann in", "stream": True}
        async with client.stream("POST", "/v1/runs", json=body) as r:
            assert r.status_code == 200
            run_id = r.headers["location"].rsplit("/", 1)[1]
            sse = "\n".join([line async for line in r.aiter_lines()])
        record = (await client.get(f"/v1/runs/{run_id}")).json()
        events = (await client.get(f"/v1/runs/{run_id}/events")).text
        journal = msgspec.json.encode(await store.journal(run_id)).decode()
    assert record["status"] == "completed", record
    deltas = [
        json.loads(line[6:]) for line in sse.splitlines()
        if line.startswith("data: {") and '"offset"' in line
    ]
    streamed = "".join(d.get("content", "") + d.get("reasoning", "") for d in deltas)
    assert "[secret]" in record["output"] and "[secret]" in journal
    assert "[secret]" in streamed or (chunk == 64 and not streamed)
    where: dict[str, Any] = {
        "sse": sse, "streamed text": streamed, "record": json.dumps(record),
        "events": events, "journal": journal,
    }
    leaked = {name: _in_clear(text) for name, text in where.items() if _in_clear(text)}
    assert not leaked
    # What was not secret still reads as it was said.
    assert "welcome ann; you logged in with [secret] (key [secret])" in journal
    assert record["output"].startswith("Done. Password [secret], backwards [secret]")


class EchoModel(Model):
    """Answers with what it read of the user's input (and so shows what was stored)."""

    name = "echo"

    async def request(self, request: ModelRequest) -> ModelResponse:
        said = [m.content for m in request.messages if m.role == "user"]
        return ModelResponse(content=f"you said: {said[-1]}")


async def test_a_secret_in_the_users_input_is_not_stored_or_streamed(store: RunStore) -> None:
    agent = Agent("echo", EchoModel(), "You echo.", secrets=[KEY])
    typed = f"my key is {KEY.upper()} and spelled {' '.join(KEY)}; check it"
    async with gateway_client(agents=[ServedAgent(agent)], store=store) as (_, client):
        body = {"agent": "echo", "input": typed, "stream": True}
        async with client.stream("POST", "/v1/runs", json=body) as r:
            assert r.status_code == 200
            run_id = r.headers["location"].rsplit("/", 1)[1]
            sse = "\n".join([line async for line in r.aiter_lines()])
        record = (await client.get(f"/v1/runs/{run_id}")).json()
        events = (await client.get(f"/v1/runs/{run_id}/events")).text
        journal = msgspec.json.encode(await store.journal(run_id)).decode()
        stored = await store.get(run_id)
    assert record["status"] == "completed", record
    assert stored is not None
    assert stored.input == "my key is [secret] and spelled [secret]; check it"
    assert record["output"] == f"you said: {stored.input}"
    where = {"sse": sse, "record": json.dumps(record), "events": events, "journal": journal}
    assert {name: _in_clear(text) for name, text in where.items() if _in_clear(text)} == {}


async def test_a_secret_in_the_input_of_an_engine_run_is_not_stored(tmp_path: Path) -> None:
    from podium.engine.driver import Engine

    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    agent = Agent("echo", EchoModel(), "You echo.", secrets=[KEY])
    async with store, Engine(store) as engine:
        encoded = base64.b64encode(KEY.encode()).decode()
        record = await engine.run(agent, f"key: {encoded}")
        stored = await store.get(record.run_id)
    # (the base64 padding after the match may stay: it carries no bit of the key)
    assert stored is not None and stored.input.startswith("key: [secret]")
    assert encoded[:16] not in stored.input and record.output == f"you said: {stored.input}"
