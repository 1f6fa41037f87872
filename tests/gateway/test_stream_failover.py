"""A stream is never spliced: a backend lost at a random point of many streams, the call
restarted on the other one, and what every client keeps equals the stored answer.

Two loopback OpenAI-compatible servers say different words (``alpha-3`` against
``beta-3``), so a splice shows; on each conversation's first attempt the serving one
drops the connection after a random number of tokens (a killed server, as the client
sees it). Clients: SSE ``/v1/runs`` (a ``reset`` event discards the step's deltas) and the
official OpenAI SDK on the chat facade (a ``stream_reset`` error after text was sent).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import openai
import pytest
from aiohttp import web

from conftest import KEY_A, gateway_client
from podium import Agent
from podium.gateway.service import ServedAgent
from podium.models import OpenAIChatModel, RetryPolicy
from podium.models.pool import Backend, BackendPool

pytestmark = pytest.mark.anyio

WORDS = 12
#: A busy test machine must not make the gateway shed these runs.
STEADY = {"PODIUM_LIMITS__ADAPTIVE__ENABLED": "false"}


class CuttingBackend:
    """Streams ``{label}{n}-0 … {label}{n}-11`` (``n``: the how-manyth request it serves, so
    no two generations are alike); cuts the first attempt of every conversation
    after the number of tokens ``cuts`` says (shared by the pair: one cut per input)."""

    def __init__(self, label: str, cuts: dict[str, int], cut_done: set[str]) -> None:
        self.label = label
        self.cuts = cuts
        self.cut_done = cut_done
        self.port = 0
        self.served = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = msgspec.json.decode(await request.read())
        said = body["messages"][-1]["content"]
        self.served += 1
        label = f"{self.label}{self.served}"  # every generation says its own words
        cut = None
        if said not in self.cut_done:
            self.cut_done.add(said)
            cut = self.cuts.get(said)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(WORDS):
            if cut is not None and i == cut:
                assert request.transport is not None
                request.transport.abort()  # killed mid-answer, as its clients see it
                return resp
            piece = {"choices": [{"delta": {"content": f"{label}-{i} "}}]}
            await resp.write(b"data: " + msgspec.json.encode(piece) + b"\n\n")
            await asyncio.sleep(0)
        end = {"choices": [{"delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": WORDS}}
        await resp.write(b"data: " + msgspec.json.encode(end) + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp


@pytest.fixture
async def pair_agent() -> AsyncIterator[tuple[Agent, dict[str, int]]]:
    cuts: dict[str, int] = {}
    done: set[str] = set()
    servers = [CuttingBackend("alpha", cuts, done), CuttingBackend("beta", cuts, done)]
    for s in servers:
        await s.start()
    retry = RetryPolicy(attempts=1)
    pool = BackendPool(
        [
            Backend(OpenAIChatModel(f"http://127.0.0.1:{s.port}/v1", "m", retry=retry,
                                    name=s.label))
            for s in servers
        ],
        health_interval_s=60,
    )
    agent = Agent("pair", pool, "You talk.", max_steps=2)
    try:
        yield agent, cuts
    finally:
        await pool.aclose()
        for s in servers:
            await s.stop()


def _events(text: str) -> list[dict[str, Any]]:
    out = []
    for block in text.split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name == "event":
                event["event"] = value
            elif name == "data":
                event["data"] = json.loads(value)
        if event:
            out.append(event)
    return out


def _kept(events: list[dict[str, Any]]) -> tuple[dict[int, str], int]:
    """What a client following the documented rules keeps of each step's deltas, and how
    many resets it was told of."""
    kept: dict[int, str] = {}
    resets = 0
    for e in events:
        if e["event"] == "reset":
            kept[e["data"]["step"]] = ""
            resets += 1
        elif e["event"] == "delta":
            step = e["data"]["step"]
            kept[step] = kept.get(step, "") + e["data"].get("content", "")
    return kept, resets


async def test_sse_clients_keep_the_stored_answer_across_failovers(
    pair_agent: tuple[Agent, dict[str, int]],
) -> None:
    agent, cuts = pair_agent
    rng = random.Random(31)
    inputs = [f"question {i}" for i in range(80)]  # with the chats below: 100 streams cut
    for said in inputs:
        cuts[said] = rng.randrange(1, WORDS)  # at least one token reached the client
    async with gateway_client(STEADY, agents=[ServedAgent(agent)]) as (_, client):

        async def one(said: str) -> tuple[list[dict[str, Any]], str]:
            r = await client.post(
                "/v1/runs", json={"agent": "pair", "input": said, "stream": True}, timeout=60
            )
            assert r.status_code == 200, r.text
            return _events(r.text), said

        resets = 0
        for batch in range(0, len(inputs), 8):
            results = await asyncio.gather(*(one(s) for s in inputs[batch : batch + 8]))
            for events, said in results:
                final = events[-1]
                assert final["event"] == "final", (said, events[-3:])
                assert final["data"]["status"] == "completed", final
                kept, told = _kept(events)
                resets += told
                assert kept.get(0, "") == final["data"]["output"], (said, events)
                words = final["data"]["output"].split()
                assert len(words) == WORDS and len({w.split("-")[0] for w in words}) == 1
    assert resets >= 30  # the reset reached the clients (a few may arrive before their delta)


async def test_the_openai_sdk_raises_instead_of_receiving_a_splice(
    pair_agent: tuple[Agent, dict[str, int]],
) -> None:
    agent, cuts = pair_agent
    rng = random.Random(7)
    inputs = [f"chat {i}" for i in range(20)]
    for said in inputs[:15]:
        cuts[said] = rng.randrange(1, WORDS)  # the last five run without a fault
    async with gateway_client(STEADY, agents=[ServedAgent(agent)]) as (gw, client):
        sdk = openai.AsyncOpenAI(
            base_url="http://podium.test/v1", api_key=KEY_A, max_retries=0,
            http_client=httpx.AsyncClient(transport=client._transport),
        )
        raised = 0
        async with sdk:
            for said in inputs:
                received = ""
                stream = await sdk.chat.completions.create(
                    model="pair", messages=[{"role": "user", "content": said}], stream=True
                )
                run_id = stream.response.headers["X-Podium-Run-Id"]
                try:
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            received += chunk.choices[0].delta.content
                except openai.APIError as exc:
                    assert "started again" in exc.message, exc.message
                    raised += 1
                    received = ""  # the error says: discard it
                record = await gw.wait(run_id, 30)
                assert record.status == "completed"
                if received:
                    assert received == record.output
    assert raised >= 10 and raised <= 15
