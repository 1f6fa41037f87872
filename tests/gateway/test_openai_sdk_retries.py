"""The chat facade under the official OpenAI SDK, as users call it: default retries on,
fields of OpenAI's API Podium does not use, a wait that times out. In-process gateway,
real SDK over ASGI (nothing of Podium mocked)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
from gateway_agents import react, sleepy

from conftest import KEY_A, SERVER_CONFIG, gateway_client, podium_server
from podium import Agent, FunctionModel
from podium.errors import ModelError
from podium.gateway.service import Gateway, ServedAgent

pytestmark = pytest.mark.anyio


def _broken(messages: object, request: object) -> str:
    raise ModelError("the backend is on fire")


def agents() -> list[ServedAgent]:
    return [
        ServedAgent(react()),
        ServedAgent(sleepy()),
        ServedAgent(Agent("broken", FunctionModel(_broken), "You fail.")),
    ]


@contextlib.asynccontextmanager
async def sdk(wait_s: float = 300) -> AsyncIterator[tuple[Gateway, openai.AsyncOpenAI]]:
    env = {"PODIUM_SERVER__WAIT_TIMEOUT_S": str(wait_s)}
    async with gateway_client(env, agents()) as (gw, http):
        # The SDK's defaults: max_retries=2, retrying a 409 and every 5xx.
        client = openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key=KEY_A,
                                    http_client=http)
        yield gw, client


async def test_a_failed_run_is_not_started_again_by_the_sdks_retries() -> None:
    async with sdk() as (gw, client):
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(
                model="broken", messages=[{"role": "user", "content": "go"}]
            )
        assert info.value.status_code == 502
        runs = await gw.store.list()
    assert len(runs) == 1, [r.run_id for r in runs]  # three, before: one per retry
    assert info.value.response.headers["x-should-retry"] == "false"


async def test_a_run_past_the_wait_is_not_started_again_and_says_it_goes_on() -> None:
    async with sdk(wait_s=0.2) as (gw, client):
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(
                model="sleepy", messages=[{"role": "user", "content": "go"}]
            )
        assert info.value.status_code == 504
        assert "it goes on: GET /v1/runs/" in info.value.message
        assert len(await gw.store.list()) == 1
        stream = await client.chat.completions.create(
            model="sleepy", messages=[{"role": "user", "content": "go"}], stream=True
        )
        with pytest.raises(openai.APIError) as streamed:
            async for _ in stream:
                pass
    # streamed, the same limit is the same error type (it said run_failed)
    assert isinstance(streamed.value.body, dict) and streamed.value.body["type"] == "timeout"


async def test_fields_of_openais_api_that_podium_does_not_use_are_ignored() -> None:
    """The SDK users send logprobs, store, reasoning_effort, vLLM's top_k: each was a 422.
    `tools` (LangChain's bind_tools) are offered to the model beside the agent's own; this
    agent's model does not call them, so its answer is as before."""
    weather = {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
    }
    async with sdk() as (_, client):
        reply = await client.chat.completions.create(
            model="react",
            messages=[
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "earlier", "refusal": None},
                {"role": "user", "content": "what is podium?"},
            ],
            tools=[weather],  # type: ignore[list-item]
            tool_choice="auto",
            parallel_tool_calls=False,
            logprobs=True,
            store=False,
            reasoning_effort="low",
            extra_body={"top_k": 5},
        )
    assert reply.choices[0].message.content == "42."


def test_an_mcp_call_whose_run_is_not_done_says_why(tmp_path: Path) -> None:
    """It said "run … running (None): " for a run past the wait (a real server: the MCP
    endpoint lives in its lifespan)."""
    env = {"PODIUM_SERVER__WAIT_TIMEOUT_S": "0.2", "PODIUM_SERVER__DRAIN_GRACE_S": "0.5"}
    with podium_server(tmp_path, SERVER_CONFIG, env) as server:
        r = httpx.post(
            f"{server.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "sleepy", "arguments": {"input": "go"}}},
            headers={"Accept": "application/json, text/event-stream",
                     "Authorization": f"Bearer {KEY_A}"},
            timeout=30,
        )
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert result["isError"] is True
    (text,) = [c["text"] for c in result["content"]]
    assert "did not finish within 0.2s (wait_timeout_s); it goes on: GET /v1/runs/" in text
    assert "None" not in text
