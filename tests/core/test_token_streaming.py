"""The engine streams a step's model call while someone listens to the run, and only then;
the journal keeps whole turns either way. The simulated model paces its tokens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from podium import (
    Agent,
    Engine,
    FunctionModel,
    LatencyModel,
    ModelRequest,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    tool,
)
from podium.engine.records import RunFinished, StepRecord
from podium.models.base import StreamDelta
from podium.streaming import LocalTokenChannel, TokenDelta

pytestmark = pytest.mark.anyio

ANSWER = "Order A-1 left the warehouse on Monday and arrives on Thursday."


@tool
async def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


class CountingModel(SimulatedModel):
    """The simulated model, counting the calls it answered by streaming."""

    streamed = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        self.streamed += 1
        async for delta in super().stream(request):
            yield delta


def scenario() -> Scenario:
    call = SimToolCall("lookup", {"q": "A-1"})
    return Scenario(steps=(SimStep((call,), "Let me look."),), final=ANSWER)


def agent(model: SimulatedModel) -> Agent:
    return Agent("support", model, "You help.", [lookup])


async def listen_to_run(
    engine: Engine, channel: LocalTokenChannel, a: Agent
) -> tuple[list[TokenDelta], list[float], str]:
    record = await engine.create(a, "Where is A-1?")
    sub = await channel.subscribe(record.run_id)
    deltas: list[TokenDelta] = []
    arrived: list[float] = []

    async def collect() -> None:
        while True:
            got = await sub.get()
            deltas.extend(got)
            arrived.extend([time.perf_counter()] * len(got))

    collector = asyncio.create_task(collect())
    try:
        done = await engine.execute(a, record)
    finally:
        collector.cancel()
        deltas.extend(sub.get_nowait())  # what came after the collector's last turn
        sub.close()
    assert done.status == "completed" and done.output == ANSWER
    return deltas, arrived, record.run_id


def text(deltas: list[TokenDelta], step: int) -> str:
    return "".join(d.content for d in deltas if d.step == step)


async def test_a_listened_run_streams_every_step_and_journals_whole_turns() -> None:
    channel = LocalTokenChannel()
    model = CountingModel(scenario(), latency=LatencyModel(ttft_s=0.002, per_token_s=0.0005))
    async with Engine() as engine:
        engine.tokens = channel
        deltas, _, run_id = await listen_to_run(engine, channel, agent(model))
        journal = [e for _, e in await engine.store.journal(run_id)]
    assert model.streamed == 2
    assert text(deltas, 0) == "Let me look." and text(deltas, 1) == ANSWER
    assert len([d for d in deltas if d.step == 1]) == len(ANSWER.split())  # token by token
    calls = [d for d in deltas if d.tool_name or d.arguments]
    assert calls[0].tool_name == "lookup"
    assert "".join(d.arguments for d in calls) == '{"q":"A-1"}'
    # Only whole turns are journaled: two steps and the end, no deltas.
    assert [type(e) for e in journal] == [StepRecord, StepRecord, RunFinished]
    assert journal[1].message.content == ANSWER  # type: ignore[union-attr]
    assert not channel.listening(run_id)


async def test_nobody_listening_means_no_streamed_call() -> None:
    model = CountingModel(scenario(), latency=LatencyModel(ttft_s=0.001))
    async with Engine() as engine:
        engine.tokens = LocalTokenChannel()  # a channel, but no listener
        record = await engine.run(agent(model), "Where is A-1?")
    assert record.status == "completed" and model.streamed == 0 and model.calls == 2


async def test_tokens_come_paced_by_the_latency_model() -> None:
    channel = LocalTokenChannel()
    latency = LatencyModel(ttft_s=0.05, per_token_s=0.01)
    model = SimulatedModel(Scenario(final=ANSWER), latency=latency)
    async with Engine() as engine:
        engine.tokens = channel
        started = time.perf_counter()
        deltas, arrived, _ = await listen_to_run(engine, channel, agent(model))
    assert text(deltas, 0) == ANSWER
    # The first token after the time to first token, the last after the output's tokens.
    assert arrived[0] - started >= 0.05
    # (Measured from the start: the pacing is a schedule from the call's start, so a first
    # delivery a busy loop delays shortens the first-to-last gap, never the whole.)
    assert arrived[-1] - started >= 0.05 + 0.01 * (len(ANSWER) // 4) * 0.9


async def test_a_model_that_cannot_stream_answers_a_listened_run_whole() -> None:
    channel = LocalTokenChannel()
    model = FunctionModel(lambda messages, tools: ANSWER)
    a = Agent("plain", model, "You help.")
    async with Engine() as engine:
        engine.tokens = channel
        record = await engine.create(a, "q")
        sub = await channel.subscribe(record.run_id)
        done = await engine.execute(a, record)
        sub.close()
    assert done.status == "completed" and done.output == ANSWER


async def test_the_simulated_stream_adds_up_to_the_reply() -> None:
    model = SimulatedModel(scenario())
    for step in (0, 1):
        request = ModelRequest((), run_id="r", step=step)
        deltas = [d async for d in model.stream(request)]
        reply = deltas[-1].response
        assert reply is not None
        assert "".join(d.content for d in deltas[:-1]) == reply.content
        for i, call in enumerate(reply.tool_calls):
            pieces = [d for d in deltas if d.tool_call_index == i]
            assert pieces[0].tool_name == call.name
            assert "".join(d.arguments for d in pieces) == call.arguments


async def test_each_delta_carries_its_offset_in_the_steps_streamed_text() -> None:
    from podium.streaming.base import delta_size

    channel = LocalTokenChannel()
    model = CountingModel(scenario(), latency=LatencyModel(ttft_s=0.002, per_token_s=0.0005))
    async with Engine() as engine:
        engine.tokens = channel
        deltas, _, _ = await listen_to_run(engine, channel, agent(model))
    for step in (0, 1):
        offset = 0
        for delta in [d for d in deltas if d.step == step]:
            assert delta.offset == offset, (step, delta)
            offset += delta_size(delta)
        assert offset > 0
    assert [d.offset for d in deltas if d.step == 1][:3] == [0, len("Order"), len("Order A-1")]


def test_step_offsets_drop_what_a_call_made_again_sends_twice() -> None:
    from podium.streaming.base import StepOffsets

    sent = StepOffsets()
    first = [TokenDelta(1, "Order", offset=0), TokenDelta(1, " A-1", offset=5)]
    assert sent.unsent(first) == first
    # The call is made again (another worker): it streams from offset 0.
    again = [TokenDelta(1, "Order", offset=0), TokenDelta(1, " A-1", offset=5),
             TokenDelta(1, " left", offset=9)]
    assert sent.unsent(again) == [TokenDelta(1, " left", offset=9)]
    # Cut differently this time: only the part not sent yet is kept.
    assert sent.unsent([TokenDelta(1, "A-1 left on", offset=6)]) == [
        TokenDelta(1, " on", offset=14)
    ]
    # A gap (deltas lost, or a listener that came in mid-step) is not filled, but kept.
    assert sent.unsent([TokenDelta(1, " Monday", offset=30)]) == [
        TokenDelta(1, " Monday", offset=30)
    ]
    # Another step counts on its own; a call's name counts as text (its repeat is found).
    call = TokenDelta(2, tool_call_index=0, tool_name="lookup", offset=0)
    args = TokenDelta(2, tool_call_index=0, arguments='{"q":1}', offset=6)
    assert sent.unsent([call, args]) == [call, args]
    assert sent.unsent([call, args]) == []
    sent.forget(2)
    assert sent.unsent([call]) == [call]


def test_a_reset_voids_what_was_delivered_of_its_step_only() -> None:
    from podium.streaming.base import StepOffsets, TokenSubscription

    sent = StepOffsets()
    reset = TokenDelta(1, reset=True)
    assert sent.unsent([reset]) == []  # nothing of the step delivered: nothing to discard
    assert sent.unsent([TokenDelta(1, "Order", offset=0)]) == [TokenDelta(1, "Order")]
    # the call started again (another backend): the client is told, then gets it all
    again = [reset, TokenDelta(1, "Parcel", offset=0)]
    assert sent.unsent(again) == again
    assert sent.unsent([reset]) == [reset]

    sub = TokenSubscription("r", lambda _: None, limit=2)
    sub.feed([reset])
    assert sub.get_nowait() == []  # a call's first reset, before any of its text
    sub.feed([TokenDelta(1, "a"), TokenDelta(1, "b"), TokenDelta(1, "c")])  # "c" overflows
    sub.feed([reset, TokenDelta(1, "x")])
    assert sub.get_nowait() == [reset, TokenDelta(1, "x")]  # the void step starts again
