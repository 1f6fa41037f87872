"""OpenAIChatModel against ``podium sim-server`` taught real servers' awkward corners.

Each test runs the real sim-server subprocess on loopback with the behaviour
switched on: reasoning deltas, streams without usage, keep-alive pings without
tokens, invalid requests answered with 500, context-length errors in each
server's words, and ``tool_choice``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from backend_servers import ReplayServer, Reply, SimServerProcess, fixture_bytes

from podium.errors import (
    ConfigError,
    ModelContextLengthError,
    ModelHTTPError,
    ModelTimeoutError,
)
from podium.messages import Message
from podium.models import (
    CircuitBreaker,
    ModelRequest,
    ModelSettings,
    OpenAIChatModel,
    RetryPolicy,
    Timeouts,
    ToolDefinition,
)
from podium.models.openai_errors import http_error

pytestmark = pytest.mark.anyio
Factory = Callable[..., SimServerProcess]

TOOLS = (
    ToolDefinition("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}}}),
    ToolDefinition("fetch", "Fetch", {"type": "object", "properties": {"url": {"type": "string"}}}),
)
FAST_RETRY = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)


def req(
    text: str = "hi",
    *,
    tools: bool = False,
    sim: dict[str, object] | None = None,
    prompt_tokens: int = 0,
    **settings: object,
) -> ModelRequest:
    extra = {"sim": sim} if sim else None
    return ModelRequest(
        messages=[Message("user", text)],
        tools=TOOLS if tools else (),
        settings=ModelSettings(extra_body=extra, **settings),  # type: ignore[arg-type]
        prompt_tokens=prompt_tokens,
    )


async def test_reasoning_deltas_are_kept_and_count_for_ttft(sim_server: SimServerProcess) -> None:
    sim = {"reasoning_tokens": 5}
    async with OpenAIChatModel(sim_server.base_url, "podium-sim", stream=True) as m:
        r = await m.request(req(sim=sim))
        deltas = [d async for d in m.stream(req(sim=sim))]
    assert r.reasoning == "hmm " * 5 and r.content
    # the first token is a reasoning token: TTFT is its time, not the answer's
    assert r.ttft_s == r.token_times_s[0] and len(r.token_times_s) == 5 + 6
    assert [d.reasoning for d in deltas[:5]] == ["hmm "] * 5 and deltas[5].content
    final = deltas[-1].response
    assert final is not None and final.reasoning == r.reasoning
    async with OpenAIChatModel(sim_server.base_url, "podium-sim") as m:
        plain = await m.request(req(sim=sim))
    assert plain.reasoning == "hmm hmm hmm hmm hmm" and plain.content


async def test_stream_without_usage_counts_tokens(sim_server_factory: Factory) -> None:
    server = sim_server_factory("--step-ms", "1", "--output-tokens", "7", "--no-usage")
    async with OpenAIChatModel(server.base_url, "podium-sim", stream=True) as m:
        r = await m.request(req(prompt_tokens=42))
        deltas = [d async for d in m.stream(req(prompt_tokens=42))]
    assert r.usage_estimated and r.usage.output_tokens == 7 and r.usage.input_tokens == 42
    final = deltas[-1].response
    assert final is not None and final.usage_estimated and final.usage.output_tokens == 7
    async with OpenAIChatModel(server.base_url, "x") as m:
        plain = await m.request(req(prompt_tokens=42))
    # a non-streamed reply has no token events: about four characters a token
    assert plain.usage_estimated and plain.usage.input_tokens == 42
    assert plain.usage.output_tokens == (len(plain.content) + 3) // 4 > 0


async def test_usage_from_the_server_is_not_estimated(sim_server: SimServerProcess) -> None:
    async with OpenAIChatModel(sim_server.base_url, "podium-sim", stream=True) as m:
        r = await m.request(req(prompt_tokens=1))
    assert not r.usage_estimated and r.usage.output_tokens == 6 and r.usage.input_tokens > 1


@pytest.mark.parametrize("streamed", [True, False])
async def test_keepalive_pings_without_tokens_time_out(
    sim_server: SimServerProcess, streamed: bool
) -> None:
    timeouts = Timeouts(token_idle_s=0.3, read_s=30.0)
    async with OpenAIChatModel(
        sim_server.base_url, "podium-sim", stream=True, timeouts=timeouts
    ) as m:
        with pytest.raises(ModelTimeoutError, match=r"no token for 0\.3s"):
            if streamed:
                async for _ in m.stream(req(sim={"stall_after": 2})):
                    pass
            else:
                await m.request(req(sim={"stall_after": 2}))


async def test_invalid_request_500_is_not_retried_and_keeps_the_breaker_closed(
    sim_server_factory: Factory,
) -> None:
    server = sim_server_factory("--step-ms", "1", "--invalid-500")
    breaker = CircuitBreaker(failures=1, reset_s=60.0)
    async with OpenAIChatModel(
        server.base_url, "podium-sim", retry=FAST_RETRY, breaker=breaker
    ) as m:
        for _ in range(2):
            with pytest.raises(ModelHTTPError) as info:
                await m.request(req(tools=True, tool_choice="nope"))
            assert info.value.status == 500 and info.value.invalid_request
            assert "Invalid tool_choice: 'nope'" in str(info.value)
        assert m.retries == 0 and breaker.state == "closed"
        ok = await m.request(req(tools=True))  # the endpoint still serves
    assert ok.tool_calls


async def test_server_errors_are_still_retried(replay: ReplayServer) -> None:
    replay.default = Reply(status=500, body=b'{"error":{"message":"CUDA out of memory"}}')
    async with OpenAIChatModel(replay.base_url, "m", retry=FAST_RETRY) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(req())
    assert not info.value.invalid_request and len(replay.requests) == 3


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("vllm", "Please reduce the length of the messages or completion."),
        ("ollama", "the input length exceeds the context length"),
    ],
)
async def test_context_overflow_is_typed_and_whole(
    sim_server_factory: Factory, kind: str, words: str
) -> None:
    server = sim_server_factory("--step-ms", "1", "--context-tokens", "60", "--context-error", kind)
    async with OpenAIChatModel(server.base_url, "podium-sim", retry=FAST_RETRY) as m:
        await m.request(req("short"))
        with pytest.raises(ModelContextLengthError) as info:
            await m.request(req("long " * 200))
    err = info.value
    assert err.status == 400 and err.invalid_request and m.retries == 0
    assert str(err).endswith(words) and err.message.endswith(words)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            b'{"error":{"code":400,"message":"the request exceeds the available context size,'
            b' try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,'
            b'"n_ctx":4096}}',
        ),
        (
            400,
            b'{"object":"error","message":"The input (9000 tokens) is longer than the model\'s'
            b' context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}',
        ),
        (
            400,
            b'{"error":{"message":"\'max_tokens\' or \'max_completion_tokens\' is too large: 8000.'
            b" This model's maximum context length is 4096 tokens and your request has 2778"
            b' input tokens (8000 > 4096 - 2778). None","type":"BadRequestError","param":null,'
            b'"code":400}}',
        ),
    ],
)
def test_context_overflow_texts_of_llamacpp_sglang_and_new_vllm(status: int, body: bytes) -> None:
    err = http_error(status, body)
    assert isinstance(err, ModelContextLengthError) and err.invalid_request


def test_long_messages_are_kept_whole_and_bounded() -> None:
    text = "word " * 300
    err = http_error(400, ('{"error":{"message":"' + text + '"}}').encode())
    assert err.message == text.strip() and str(err) == "HTTP 400: " + text.strip()
    huge = http_error(500, b"x" * 50_000)
    assert len(str(huge)) < 8_100 and "more characters" in str(huge)
    loading = http_error(503, fixture_bytes("llamacpp_loading_503.json"))
    assert str(loading) == "HTTP 503: Loading model" and not loading.invalid_request


async def test_tool_choice_modes_reach_the_server(sim_server: SimServerProcess) -> None:
    done = {"tool_steps": 0}  # the script would answer: tool_choice decides
    async with OpenAIChatModel(sim_server.base_url, "podium-sim") as m:
        r = await m.request(req(tools=True, sim=done, tool_choice="required"))
        assert r.tool_calls[0].name == "search"
        r = await m.request(req(tools=True, sim=done, tool_choice="fetch"))
        assert r.tool_calls[0].name == "fetch"
        r = await m.request(req(tools=True, tool_choice="none"))
        assert not r.tool_calls and r.content
        r = await m.request(req(tools=True, tool_choice="auto"))
        assert r.tool_calls[0].name == "search"


async def test_tool_choice_on_the_wire(replay: ReplayServer) -> None:
    replay.default = Reply(body=fixture_bytes("llamacpp_chat.json"))
    async with OpenAIChatModel(replay.base_url, "m") as m:
        await m.request(req(tools=True, tool_choice="required"))
        await m.request(req(tools=True, tool_choice="fetch"))
        await m.request(req(tool_choice="required"))  # no tools: not sent
        await m.request(req(tools=True))
    sent = [r.get("tool_choice") for r in replay.requests]
    assert sent == ["required", {"type": "function", "function": {"name": "fetch"}}, None, None]


def test_unknown_server_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown server 'bogus'"):
        OpenAIChatModel("http://127.0.0.1:1/v1", "m", server="bogus")


async def test_reasoning_reaches_the_journal_and_the_profile_ttft(
    sim_server: SimServerProcess,
) -> None:
    from podium import Agent, Engine, MemoryRunStore
    from podium.engine.records import ModelTurn, StepRecord

    model = OpenAIChatModel(
        sim_server.base_url,
        "podium-sim",
        stream=True,
        extra_body={"sim": {"reasoning_tokens": 3}},
    )
    store = MemoryRunStore()
    async with model:
        record = await Engine(store).run(Agent("thinker", model, "Think first."), "why?")
    assert record.status == "completed"
    turns = [
        e.message
        for _, e in await store.journal(record.run_id)
        if isinstance(e, StepRecord | ModelTurn)
    ]
    assert turns and turns[-1].reasoning == "hmm hmm hmm " and turns[-1].content
    assert record.profile is not None and record.profile.steps[0].ttft_ns > 0


@pytest.mark.parametrize(
    ("message", "invalid"),
    [
        ("ValueError: Invalid tool_choice: 'x' is not among the tools", True),
        ("1 validation error for CreateChatCompletionRequest", True),
        ("create_chat_completion() got an unexpected keyword argument 'foo'", True),
        ("CUDA error: invalid device function", False),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
        ("unknown error", False),
    ],
)
def test_which_500s_say_the_request_is_invalid(message: str, invalid: bool) -> None:
    body = ('{"error":{"message":"' + message + '","type":"internal_server_error"}}').encode()
    assert http_error(500, body).invalid_request is invalid
