"""``/v1/responses`` and client-side tools on a real ``podium serve`` over loopback, with the
official OpenAI SDK and the OpenAI Agents SDK: a run that waits for a client tool's output
outlives the server process that handed the call out (SIGKILLed), and the client's output,
sent to the next server on the same SQLite store, finishes it."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from conftest import HERE, KEY_A
from serve_process import Serving, start_serve

pytestmark = pytest.mark.slow  # podium serve subprocesses

CONFIG = f"""
[server]
store = "sqlite:runs.sqlite"
drain_grace_s = 2

[[agents]]
path = "gateway_agents:weatherman"
[[agents]]
path = "gateway_agents:memory"
[[agents]]
path = "gateway_agents:talky"

[[keys]]
key = "{KEY_A}"
tenant = "tenant-a"
"""

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


def _serve(tmp: Path) -> Serving:
    (tmp / "podium.toml").write_text(CONFIG)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return start_serve(["--config", "podium.toml", "--port", "0"], cwd=tmp, env=env)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Serving]:
    serving = _serve(tmp_path)
    try:
        yield serving
    finally:
        serving.stop()


def _client(serving: Serving) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{serving.url}/v1", api_key=KEY_A, max_retries=0)


def test_create_stream_and_continue_on_a_served_gateway(served: Serving) -> None:
    client = _client(served)
    first = client.responses.create(model="memory", input="my name is Ada")
    assert first.output_text == "heard: my name is Ada"
    with client.responses.stream(model="memory", input="who am I?",
                                 previous_response_id=first.id) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert final.output_text == "heard: my name is Ada | who am I?"
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_a_client_tool_call_waits_durably_through_a_killed_server(tmp_path: Path) -> None:
    first_server = _serve(tmp_path)
    try:
        chat = _client(first_server).chat.completions.create(
            model="weatherman", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[{"type": "function", "function": {
                "name": WEATHER["name"], "parameters": WEATHER["parameters"]}}],
        )
        response = _client(first_server).responses.create(
            model="weatherman", input="Weather in Lima?", tools=[WEATHER]
        )
        first_server.proc.send_signal(signal.SIGKILL)  # no drain, no goodbye
        first_server.proc.wait()
    finally:
        first_server.stop()
    (call,) = chat.choices[0].message.tool_calls or []
    (fn,) = [i for i in response.output if i.type == "function_call"]
    second_server = _serve(tmp_path)
    try:
        client = _client(second_server)
        answer = client.chat.completions.create(
            model="weatherman",
            messages=[{"role": "user", "content": "Weather in Oslo?"},
                      chat.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
                      {"role": "tool", "tool_call_id": call.id, "content": "snow"}],
        )
        resumed = client.responses.create(
            model="weatherman", previous_response_id=response.id,
            input=[{"type": "function_call_output", "call_id": fn.call_id, "output": "fog"}],
        )
    finally:
        second_server.stop()
    assert answer.choices[0].message.content == "The client says: snow"
    assert resumed.output_text == "The client says: fog"


@pytest.mark.anyio
async def test_an_openai_agents_sdk_agent_runs_its_own_tool_through_the_gateway(
    served: Serving,
) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed")
    agents.set_tracing_disabled(True)  # it would export traces to OpenAI's servers
    ran: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city.
        """
        ran.append(city)
        return f"warm in {city}"

    client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=KEY_A, max_retries=0)
    model = agents.OpenAIResponsesModel(model="weatherman", openai_client=client)
    agent = agents.Agent(name="forecaster", instructions="Use the tools.", model=model,
                         tools=[get_weather])
    result = await agents.Runner.run(agent, "Weather in Kyoto?")
    assert ran == ["Kyoto"]  # the Agents SDK ran its tool, once, on the gateway's call
    assert result.final_output == "The client says: warm in Kyoto"

    streamed = agents.Runner.run_streamed(agent, "Weather in Quito?")
    kinds = [e.type async for e in streamed.stream_events()]
    assert streamed.final_output == "The client says: warm in Quito"
    assert "raw_response_event" in kinds
    assert ran == ["Kyoto", "Quito"]

    # Its server-side conversation mode: each turn sends only what is new, with
    # previous_response_id (the tool's output too).
    chained = await agents.Runner.run(agent, "Weather in Lima?", auto_previous_response_id=True)
    assert chained.final_output == "The client says: warm in Lima"
    assert ran == ["Kyoto", "Quito", "Lima"]
    remembers = agents.Agent(name="listener", instructions="Listen.", model=agents.
                             OpenAIResponsesModel(model="memory", openai_client=client))
    first = await agents.Runner.run(remembers, "my name is Ada")
    second = await agents.Runner.run(remembers, "who am I?",
                                     previous_response_id=first.last_response_id)
    assert "my name is Ada" in second.final_output
    assert second.final_output.endswith("| who am I?")
    await client.close()
