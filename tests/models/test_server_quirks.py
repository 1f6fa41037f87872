"""Server kinds against ``podium sim-server`` playing a real server's quirks: a
llama-cpp-python (``--mimic``: its ``/v1/models`` cuts the generation in progress, it
refuses ``json_schema`` with a 500, it calls a tool only when one is named) and a hung
server (``--hang-after``)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest
from backend_servers import SimServerProcess

from podium import Agent, Engine, MemoryRunStore
from podium.errors import ModelTimeoutError
from podium.messages import Message
from podium.models import ModelRequest, OpenAIChatModel, RetryPolicy, Timeouts
from podium.models.openai_errors import BackendStalledError
from podium.models.openai_wire import StreamTruncatedError

pytestmark = pytest.mark.anyio

MIMIC = ("--mimic", "llama-cpp-python", "--step-ms", "2", "--output-tokens", "30")
ONCE = RetryPolicy(attempts=1)


class Verdict(msgspec.Struct):
    label: str
    score: int


@pytest.mark.parametrize("kind", [None, "llamacpp", "llama-cpp-python"])
async def test_a_probe_never_cuts_a_generation(
    sim_server_factory: Callable[..., SimServerProcess], kind: str | None
) -> None:
    server = sim_server_factory(*MIMIC)
    model = OpenAIChatModel(server.base_url, "m", server=kind, retry=ONCE)
    async with model:
        stream = model.stream(ModelRequest([Message("user", "hi")]))
        first = await anext(stream)
        assert first.content
        assert await model.health()  # in the middle of the generation
        deltas = [d async for d in stream]
    final = deltas[-1].response
    assert final is not None and final.finish_reason == "stop"


async def test_the_old_default_probe_cut_it(
    sim_server_factory: Callable[..., SimServerProcess],
) -> None:
    """What the issue saw: ``/v1/models`` as the probe ends the stream early."""
    server = sim_server_factory(*MIMIC)
    model = OpenAIChatModel(server.base_url, "m", health_paths=("/v1/models",), retry=ONCE)
    async with model:
        stream = model.stream(ModelRequest([Message("user", "hi")]))
        await anext(stream)
        assert await model.health()
        with pytest.raises(StreamTruncatedError):
            async for _ in stream:
                pass


@pytest.mark.parametrize("mode", ["native", "tool"])
async def test_declared_agents_get_structured_output_from_llama_cpp_python(
    sim_server_factory: Callable[..., SimServerProcess], mode: str
) -> None:
    server = sim_server_factory(*MIMIC)
    model = OpenAIChatModel(server.base_url, "m", server="llama-cpp-python", retry=ONCE)
    agent = Agent("judge", model, "Judge.", output_type=Verdict, output_mode=mode,
                  output_retries=0)
    async with model:
        record = await Engine(MemoryRunStore()).run(agent, "How good?")
    assert record.status == "completed", record.error
    verdict = msgspec.json.decode(record.output or "", type=Verdict)
    assert isinstance(verdict.score, int)


async def test_json_schema_is_what_llama_cpp_python_refuses(
    sim_server_factory: Callable[..., SimServerProcess],
) -> None:
    """Without the kind: the 500 the issue saw, a client error, not retried."""
    server = sim_server_factory(*MIMIC)
    model = OpenAIChatModel(server.base_url, "m", retry=RetryPolicy(attempts=3))
    agent = Agent("judge", model, "Judge.", output_type=Verdict, output_retries=0)
    async with model:
        record = await Engine(MemoryRunStore()).run(agent, "How good?")
    assert record.status == "failed" and "json_object" in (record.error or "")
    assert model.retries == 0


async def test_a_hung_server_is_a_stall_and_its_probe_times_out(
    sim_server_factory: Callable[..., SimServerProcess],
) -> None:
    server = sim_server_factory("--hang-after", "1", "--step-ms", "1", "--output-tokens", "4")
    model = OpenAIChatModel(
        server.base_url, "m", stream=True, retry=ONCE, timeouts=Timeouts(first_token_s=0.5)
    )
    async with model:
        first = await model.request(ModelRequest([Message("user", "hi")]))
        assert first.content
        with pytest.raises(BackendStalledError):
            await model.request(ModelRequest([Message("user", "again")]))
        with pytest.raises(ModelTimeoutError):
            await model.health(timeout_s=0.3)


async def test_an_unnamed_llama_cpp_python_is_recognised_by_its_first_probe(
    sim_server_factory: Callable[..., SimServerProcess],
) -> None:
    server = sim_server_factory(*MIMIC)
    model = OpenAIChatModel(server.base_url, "m", retry=ONCE)
    agent = Agent("judge", model, "Judge.", output_type=Verdict, output_retries=0)
    async with model:
        assert model.kind is None
        assert await model.health()  # /health: 404, /openapi.json: its title says
        assert model.kind == "llama-cpp-python"
        record = await Engine(MemoryRunStore()).run(agent, "How good?")
    assert record.status == "completed", record.error
