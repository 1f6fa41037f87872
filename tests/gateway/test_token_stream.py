"""Model tokens reach streaming clients as they are produced: the official ``openai`` SDK on
the chat facade, SSE ``delta`` events on ``/v1/runs``, a reconnect with ``Last-Event-ID``,
and a client that hangs up mid-stream (through a real ``podium serve`` on loopback)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from gateway_agents import TALKY_ANSWER, chatty, talky

from conftest import KEY_A, ServerProcess, gateway_client, podium_server
from podium.gateway.service import ServedAgent

pytestmark = pytest.mark.anyio

CONFIG = f"""
[server]
store = "memory"

[[agents]]
path = "gateway_agents:talky"

[[keys]]
key = "{KEY_A}"
tenant = "tenant-a"
"""

Event = dict[str, Any]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with podium_server(tmp_path_factory.mktemp("stream"), CONFIG) as srv:
        yield srv


def sse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Parsed SSE events (``event``, ``data`` decoded, ``id`` if any) as they arrive."""
    event: Event = {}
    for line in lines:
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            event[name] = json.loads(value) if name == "data" else value


def step_texts(events: list[Event]) -> dict[int, str]:
    """The text of each step as the deltas brought it (a ``reset`` discards the step's)."""
    texts: dict[int, str] = {}
    for e in events:
        if e["event"] == "reset":
            texts[e["data"]["step"]] = ""
        elif e["event"] == "delta":
            step = e["data"]["step"]
            texts[step] = texts.get(step, "") + e["data"].get("content", "")
    return texts


async def test_the_openai_sdk_gets_the_answer_token_by_token(served: ServerProcess) -> None:
    client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=KEY_A, max_retries=0)
    async with client:
        stream = await client.chat.completions.create(
            model="talky",
            messages=[{"role": "user", "content": "Where is my order A-1?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = []
        arrived = []
        async for chunk in stream:
            chunks.append(chunk)
            arrived.append(time.perf_counter())
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [
        (c, t)
        for c, t in zip(chunks, arrived, strict=True)
        if c.choices and c.choices[0].delta.content
    ]
    assert len(content) >= len(TALKY_ANSWER.split()) // 2  # one chunk per token, not one
    assert "".join(c.choices[0].delta.content for c, _ in content) == TALKY_ANSWER
    # Live: the chunks came over the time the model took to say them, not at the end.
    assert content[-1][1] - content[0][1] > 0.1
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and finish.count("stop") == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_sse_deltas_come_between_the_journal_events(served: ServerProcess) -> None:
    with (
        served.client() as client,
        client.stream(
            "POST", "/v1/runs", json={"agent": "talky", "input": "Where is A-1?", "stream": True}
        ) as r,
    ):
        assert r.status_code == 200
        events = list(sse_events(r.iter_lines()))
    names = [e["event"] for e in events]
    assert names[-1] == "final" and events[-1]["data"]["status"] == "completed"
    replies = [i for i, n in enumerate(names) if n == "model_reply"]
    finished = [i for i, n in enumerate(names) if n == "step_finished"]
    assert len(replies) == len(finished) == 3
    for step, (reply, end) in enumerate(zip(replies, finished, strict=True)):
        begin = finished[step - 1] if step else -1
        for i, e in enumerate(events):
            if e["event"] == "delta" and e["data"]["step"] == step:
                assert begin < i < reply  # after the last step's end, before its own reply
                assert "id" not in e  # deltas are not resumable
        assert reply < end
    texts = step_texts(events)
    assert texts[2] == TALKY_ANSWER == events[replies[2]]["data"]["message"]["content"]
    tool_call = [e["data"] for e in events if e["event"] == "delta" and e["data"]["step"] == 0]
    assert tool_call[0]["tool_name"] == "lookup"
    assert "".join(d.get("arguments", "") for d in tool_call) == '{"query":"A-1"}'


def test_a_reconnect_with_last_event_id_resumes_at_the_step(served: ServerProcess) -> None:
    with served.client() as client:
        run_id = client.post("/v1/runs", json={"agent": "talky", "input": "q"}).json()["id"]
        first: list[Event] = []
        with client.stream("GET", f"/v1/runs/{run_id}/events") as r:
            for event in sse_events(r.iter_lines()):
                first.append(event)
                if event["event"] == "step_finished":
                    break  # hang up mid-run, right after step 0
        last_id = first[-1]["id"]
        headers = {"Last-Event-ID": last_id}
        with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
            rest = list(sse_events(r.iter_lines()))
    # The journal events after the id, none again; deltas only of the steps still to come.
    assert all(int(e["id"]) > int(last_id) for e in rest if "id" in e)
    assert all(e["data"]["step"] >= 1 for e in rest if e["event"] == "delta")
    assert [e["event"] for e in rest if e["event"] != "delta"][-1] == "final"
    assert len([e for e in rest if e["event"] == "model_reply"]) == 2
    # The answer's step began after the reconnect: its tokens came whole, from the first.
    assert step_texts(rest)[2] == TALKY_ANSWER


def test_a_client_that_hangs_up_mid_stream_leaves_the_run_going(served: ServerProcess) -> None:
    with served.client() as client:
        body = {"agent": "talky", "input": "q", "stream": True}
        with client.stream("POST", "/v1/runs", json=body) as r:
            run_id = r.headers["location"].rsplit("/", 1)[1]
            deltas = 0
            for event in sse_events(r.iter_lines()):
                deltas += event["event"] == "delta"
                if deltas == 3:
                    break  # the connection closes mid-step
        got = httpx.Client(base_url=served.url, headers=client.headers, timeout=30)
        with got:
            for _ in range(300):  # bounded: the run takes about half a second
                run = got.get(f"/v1/runs/{run_id}").json()
                if run["status"] != "running" and run["status"] != "queued":
                    break
                time.sleep(0.02)
        assert run["status"] == "completed" and run["output"] == TALKY_ANSWER
        # And the server streams the next client as before.
        chat = openai.OpenAI(base_url=f"{served.url}/v1", api_key=KEY_A, max_retries=0)
        stream = chat.chat.completions.create(
            model="talky", messages=[{"role": "user", "content": "q"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == TALKY_ANSWER


async def test_steps_that_say_something_are_streamed_before_the_answer() -> None:
    agents = [ServedAgent(chatty())]
    async with gateway_client(agents=agents) as (_, client):
        body = {"model": "chatty", "messages": [{"role": "user", "content": "q"}]}
        r = await client.post("/v1/chat/completions", json={**body, "stream": True})
        chunks = [
            json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")
        ]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        # What the model said at each step, a blank line between; the reply alone unstreamed.
        assert text == "Let me check.\n\nLet me check.\n\n" + TALKY_ANSWER
        whole = await client.post("/v1/chat/completions", json=body)
        assert whole.json()["choices"][0]["message"]["content"] == TALKY_ANSWER


async def test_the_stream_is_whole_without_a_token_channel() -> None:
    # A gateway built without a channel (distributed, Redis pub/sub away): whole steps.
    async with gateway_client(agents=[ServedAgent(talky())]) as (gw, client):
        gw.tokens = None
        body = {"model": "talky", "messages": [{"role": "user", "content": "q"}], "stream": True}
        r = await client.post("/v1/chat/completions", json=body)
        chunks = [
            json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")
        ]
        texts = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        assert [t for t in texts if t] == [TALKY_ANSWER]


async def test_a_streamed_call_made_again_is_never_spliced() -> None:
    """The model's stream breaks off with a malformed reply after a few tokens and the
    engine asks again (as a worker that took over a dead one's run would): the new
    attempt streams from its first token after a reset, so an SSE client that discards
    on ``reset`` keeps the answer, and the chat facade, which cannot take text back,
    ends in a ``stream_reset`` error instead of gluing two generations together."""
    from collections.abc import AsyncIterator

    from podium import LatencyModel, ModelReplyError, Scenario, SimulatedModel
    from podium.models.base import ModelRequest, StreamDelta

    broke: list[str] = []  # the runs whose first stream broke off

    class Stuttering(SimulatedModel):
        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
            count = 0
            async for delta in super().stream(request):
                if count == 4 and request.run_id not in broke:
                    broke.append(request.run_id)
                    raise ModelReplyError("the stream broke off")
                count += 1
                yield delta

    from podium import Agent

    stutter = Agent(
        "stutter",
        Stuttering(Scenario(final=TALKY_ANSWER), latency=LatencyModel(ttft_s=0.01,
                                                                     per_token_s=0.002)),
        "You track orders.",
        model_retries=1,
    )
    async with gateway_client(agents=[ServedAgent(stutter)]) as (_, client):
        body = {"model": "stutter", "messages": [{"role": "user", "content": "q"}],
                "stream": True}
        r = await client.post("/v1/chat/completions", json=body)
        chunks = [
            json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")
        ]
        texts = [c["choices"][0]["delta"].get("content") for c in chunks if "choices" in c]
        assert 0 < len([t for t in texts if t]) <= 4  # the broken attempt's tokens, then
        assert chunks[-1]["error"]["type"] == "stream_reset"  # what the SDK raises
        r = await client.post("/v1/runs", json={"agent": "stutter", "input": "q", "stream": True})
        events = list(sse_events(iter(r.text.splitlines())))
        assert [e["event"] for e in events].count("reset") == 1
        assert step_texts(events)[0] == TALKY_ANSWER
    assert len(broke) == 2
