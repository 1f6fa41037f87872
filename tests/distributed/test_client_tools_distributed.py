"""Client-side tools on Redis with real processes: a `podium serve --redis` gateway and
`podium worker` subprocesses. The run that called the client's tool waits with no worker
holding it; its worker is SIGKILLed; the client's output, sent through the Responses API,
resumes it on another worker, and the tool call the agent ran itself does not run again."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from .harness import WorkerProcess, effect_lines, redis_config, serving
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_client_tools_test"
AGENT = "tests.distributed.app:client_weather"
WEATHER: Any = {
    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(tmp_path: Path, private_redis: RedisServer) -> Iterator[str]:
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    with serving(config, tmp_path / "serve.log") as url:
        yield url


async def test_a_client_tool_wait_outlives_its_worker(
    tmp_path: Path, private_redis: RedisServer, gateway: str
) -> None:
    effects = tmp_path / "effects.log"
    first = WorkerProcess(tmp_path, "w1", private_redis.url, "podium", AGENT, effects)
    second: WorkerProcess | None = None
    client = openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    try:
        await first.wait_ready()
        response = await client.responses.create(
            model="client_weather", input="Weather in Oslo?", tools=[WEATHER]
        )
        (call,) = [i for i in response.output if i.type == "function_call"]
        assert (call.name, call.arguments) == ("get_weather", '{"city":"Oslo"}')
        first.signal(signal.SIGKILL)  # the run waits: nothing of it is lost with w1
        assert await first.wait_exit() == -signal.SIGKILL

        second = WorkerProcess(tmp_path, "w2", private_redis.url, "podium", AGENT, effects)
        await second.wait_ready()
        done = await client.responses.create(
            model="client_weather", previous_response_id=response.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "hail"}],
        )
        assert done.status == "completed"
        assert done.output_text == "The client says: hail"
        lines = effect_lines(effects)
        assert [pid for _, pid in lines] == [first.pid]  # its own tool ran once, on w1
    finally:
        await client.close()
        first.stop()
        if second is not None:
            second.stop()
