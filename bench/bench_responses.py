"""Latency of the OpenAI-compatible endpoints through an in-process gateway (no network):
what ``/v1/responses`` costs next to ``/v1/chat/completions`` for the same run, streamed
and not, and a client-tool round trip (the call handed out, its output sent back, the
run resumed: two requests).

The agents are instant (a simulated three-step run, a function model), so the figures are
the gateway's and the engine's own work per request, one request at a time. Run::

    python bench/bench_responses.py --requests 300
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from podium import (
    Agent,
    FunctionModel,
    Scenario,
    SimulatedModel,
    tool,
    tool_call_reply,
)
from podium.config import load_config
from podium.gateway.app import create_app
from podium.gateway.runtime import build_gateway
from podium.gateway.service import ServedAgent
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.store.memory import MemoryRunStore

KEY = "pk_bench_responses"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


def _asks(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if messages[-1].role == "tool":
        return f"it is {messages[-1].content}"
    return tool_call_reply(("get_weather", {"city": "Oslo"}))


def agents() -> list[ServedAgent]:
    react = Agent("react", SimulatedModel(Scenario.react("lookup", {"query": "x"},
                                                         tool_steps=2, final="42.")),
                  "You look things up.", [lookup], max_steps=6)
    return [ServedAgent(react), ServedAgent(Agent("asks", FunctionModel(_asks), "You ask."))]


async def _timed(n: int, call: Callable[[], Awaitable[None]]) -> tuple[float, float, float]:
    for _ in range(min(30, n)):  # warm-up
        await call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    times.sort()
    return (statistics.mean(times) * 1e3, times[len(times) // 2] * 1e3,
            times[int(len(times) * 0.95)] * 1e3)


async def run(requests: int) -> None:
    env = {"PODIUM_KEYS": f"{KEY}=bench", "PODIUM_LIMITS__ADAPTIVE__ENABLED": "false"}
    gw = build_gateway(load_config(None, env), agents(), store=MemoryRunStore())
    await gw.start()
    transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.bench",
                                     headers={"Authorization": f"Bearer {KEY}"}) as c:
            async def chat() -> None:
                r = await c.post("/v1/chat/completions", json={
                    "model": "react", "messages": [{"role": "user", "content": "q"}]})
                assert r.status_code == 200, r.text

            async def responses() -> None:
                r = await c.post("/v1/responses", json={"model": "react", "input": "q"})
                assert r.status_code == 200, r.text

            async def responses_stream() -> None:
                r = await c.post("/v1/responses", json={"model": "react", "input": "q",
                                                         "stream": True})
                assert "response.completed" in r.text, r.text

            async def round_trip() -> None:
                r = await c.post("/v1/responses", json={"model": "asks", "input": "Oslo?",
                                                         "tools": [WEATHER]})
                first = r.json()
                call = next(i for i in first["output"] if i["type"] == "function_call")
                r = await c.post("/v1/responses", json={
                    "model": "asks", "previous_response_id": first["id"],
                    "input": [{"type": "function_call_output", "call_id": call["call_id"],
                               "output": "sunny"}]})
                assert r.json()["status"] == "completed", r.text

            print(f"{'request':40s} {'mean':>9s} {'p50':>9s} {'p95':>9s}")
            for name, call in (("chat completion", chat), ("response", responses),
                               ("response, streamed", responses_stream),
                               ("client-tool round trip (2 requests)", round_trip)):
                mean, p50, p95 = await _timed(requests, call)
                print(f"{name:40s} {mean:7.2f}ms {p50:7.2f}ms {p95:7.2f}ms")
    finally:
        await gw.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="per kind (default 300)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the loop-lag warnings of a busy machine
    asyncio.run(run(args.requests))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
