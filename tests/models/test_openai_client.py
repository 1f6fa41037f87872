"""OpenAIChatModel against a loopback replay server: formats, retries, breaker, timeouts."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from backend_servers import HELLO_EVENTS, ReplayServer, Reply, fixture_bytes, sse_events

from podium.errors import (
    ModelHTTPError,
    ModelReplyError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from podium.messages import Message, ToolCall
from podium.models import (
    CircuitBreaker,
    ModelRequest,
    ModelSettings,
    OpenAIChatModel,
    RetryPolicy,
    StreamTruncatedError,
    Timeouts,
)

pytestmark = pytest.mark.anyio

FAST_RETRY = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)
REQ = ModelRequest(messages=[Message("system", "be brief"), Message("user", "weather in Paris?")])


def model(server: ReplayServer, **kw: object) -> OpenAIChatModel:
    kw.setdefault("retry", FAST_RETRY)
    return OpenAIChatModel(server.base_url, "m", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fixture", "calls"),
    [
        ("vllm_stream_tool_call.sse", [("get_weather", '{"city": "Paris", "unit": "celsius"}')]),
        ("llamacpp_stream_tool_call.sse", [("get_weather", '{"city":"Paris","unit":"celsius"}')]),
        (
            "ollama_stream_tool_calls.sse",
            [("run_command", '{"command":"ls"}'), ("run_command", '{"command":"ls -l"}')],
        ),
    ],
)
async def test_streamed_tool_calls_from_each_server(
    replay: ReplayServer, fixture: str, calls: list[tuple[str, str]]
) -> None:
    replay.script(Reply(chunks=sse_events(fixture)))
    async with model(replay, stream=True) as m:
        r = await m.request(REQ)
    assert [(c.name, c.arguments) for c in r.tool_calls] == calls
    assert r.finish_reason == "tool_calls"
    assert r.ttft_s is not None and r.ttft_s > 0 and r.token_times_s[0] == r.ttft_s
    assert r.cpu_ns > 0
    sent = replay.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_stream_method_yields_deltas_then_the_response(replay: ReplayServer) -> None:
    replay.script(Reply(chunks=sse_events("vllm_stream_tool_call.sse")))
    async with model(replay) as m:
        deltas = [d async for d in m.stream(REQ)]
    assert deltas[0].tool_name == "get_weather"
    final = deltas[-1].response
    assert final is not None and final.tool_calls[0].id == "chatcmpl-tool-7c2e9a"


@pytest.mark.parametrize(
    "fixture", ["vllm_chat_tool_call.json", "llamacpp_chat.json", "ollama_chat.json"]
)
async def test_plain_bodies_from_each_server(replay: ReplayServer, fixture: str) -> None:
    replay.script(Reply(body=fixture_bytes(fixture)))
    async with model(replay) as m:
        r = await m.request(REQ)
    assert r.content or r.tool_calls
    assert r.usage.input_tokens > 0 and r.ttft_s is None


async def test_server_options_are_passed_through(replay: ReplayServer) -> None:
    replay.default = Reply(body=fixture_bytes("llamacpp_chat.json"))
    req = ModelRequest(
        messages=REQ.messages,
        settings=ModelSettings(
            max_tokens=32, temperature=0.2, stop=("END",), seed=3, extra_body={"top_k": 5}
        ),
    )
    async with model(replay, extra_body={"cache_prompt": True}, api_key="sk-test") as m:
        await m.request(req)
    sent = replay.requests[0]
    assert sent["cache_prompt"] is True and sent["top_k"] == 5
    assert (sent["max_tokens"], sent["temperature"], sent["stop"], sent["seed"]) == (
        32,
        0.2,
        ["END"],
        3,
    )


async def test_429_and_503_with_retry_after_are_retried(replay: ReplayServer) -> None:
    replay.script(
        Reply(
            status=429, body=b'{"error":{"message":"slow down"}}', headers={"Retry-After": "0.2"}
        ),
        Reply(
            status=503,
            body=fixture_bytes("llamacpp_loading_503.json"),
            headers={"Retry-After": "0"},
        ),
        Reply(body=fixture_bytes("vllm_chat_tool_call.json")),
    )
    async with model(replay) as m:
        t0 = time.monotonic()
        r = await m.request(REQ)
        elapsed = time.monotonic() - t0
    assert r.tool_calls[0].name == "get_weather"
    assert len(replay.requests) == 3 and m.retries == 2
    assert elapsed >= 0.2  # Retry-After honoured


async def test_retries_spent_raise_typed_http_error(replay: ReplayServer) -> None:
    replay.default = Reply(
        status=503, body=fixture_bytes("llamacpp_loading_503.json"), headers={"Retry-After": "0"}
    )
    async with model(replay) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    assert info.value.status == 503 and "Loading model" in info.value.body
    assert info.value.retry_after == 0.0
    assert len(replay.requests) == 3


async def test_retry_after_beyond_the_cap_is_not_waited_for(replay: ReplayServer) -> None:
    replay.default = Reply(status=429, body=b"{}", headers={"Retry-After": "3600"})
    async with model(replay) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    assert info.value.retry_after == 3600 and len(replay.requests) == 1


async def test_client_errors_are_not_retried(replay: ReplayServer) -> None:
    replay.default = Reply(status=400, body=b'{"error":{"message":"bad tool schema"}}')
    async with model(replay) as m:
        with pytest.raises(ModelHTTPError, match="bad tool schema") as info:
            await m.request(REQ)
    assert info.value.status == 400 and len(replay.requests) == 1


async def test_a_404_page_names_the_url_and_the_likely_mistake(replay: ReplayServer) -> None:
    # base_url without /v1: the server has no such path, and says so in plain text
    replay.default = Reply(status=404, body=b"404: Not Found", content_type="text/plain")
    async with model(replay) as m:
        with pytest.raises(ModelHTTPError, match=r"chat/completions: is base_url") as info:
            await m.request(REQ)
    assert info.value.status == 404 and replay.base_url in str(info.value)


async def test_an_unknown_model_is_the_servers_own_404(replay: ReplayServer) -> None:
    body = b'{"error":{"message":"The model `m` does not exist.","type":"NotFoundError"}}'
    replay.default = Reply(status=404, body=body)
    async with model(replay) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    # the client's name leads (in a pool: which backend said it), then the server's words
    assert str(info.value) == f"{m.name}: HTTP 404: The model `m` does not exist."
    assert info.value.message == "The model `m` does not exist." and info.value.backend == m.name


async def test_a_failed_health_check_says_where_and_why(replay: ReplayServer) -> None:
    async with model(replay) as m:
        replay.healthy = False
        assert not await m.health()
        assert m.health_error is not None and "/health: HTTP 503" in m.health_error
        replay.healthy = True
        assert await m.health() and m.health_error is None
    url = replay.base_url
    await replay.stop()
    async with model(replay) as m:
        assert not await m.health()
        assert m.health_error is not None and url.removesuffix("/v1") in m.health_error
        assert "Cannot connect" in m.health_error


async def test_connection_refused_is_unavailable_after_retries(replay: ReplayServer) -> None:
    url = replay.base_url
    await replay.stop()
    async with OpenAIChatModel(url, "m", retry=FAST_RETRY) as m:
        with pytest.raises(ModelUnavailableError, match="after 3 attempts"):
            await m.request(REQ)


async def test_circuit_breaker_opens_then_probes(replay: ReplayServer) -> None:
    now = [0.0]
    breaker = CircuitBreaker(failures=2, reset_s=10.0, clock=lambda: now[0])
    replay.default = Reply(status=500, body=b"boom")
    async with model(replay, breaker=breaker, retry=RetryPolicy(attempts=1)) as m:
        for _ in range(2):
            with pytest.raises(ModelHTTPError):
                await m.request(REQ)
        with pytest.raises(ModelUnavailableError, match="circuit open"):
            await m.request(REQ)
        assert len(replay.requests) == 2  # the open circuit sent nothing
        now[0] = 11.0
        replay.default = Reply(body=fixture_bytes("llamacpp_chat.json"))
        await m.request(REQ)  # the half-open probe succeeds and closes the circuit
        assert breaker.state == "closed"


async def test_invalid_json_body_is_a_reply_error(replay: ReplayServer) -> None:
    replay.script(Reply(body=b'{"choices": [{"message": {"content": "cut'))
    async with model(replay) as m:
        with pytest.raises(ModelReplyError, match="invalid chat-completion body"):
            await m.request(REQ)


async def test_truncated_stream_is_a_reply_error(replay: ReplayServer) -> None:
    events = sse_events("vllm_stream_tool_call.sse")
    replay.script(Reply(chunks=events[:4]))  # ends cleanly, mid tool-call, without [DONE]
    async with model(replay, stream=True) as m:
        with pytest.raises(StreamTruncatedError, match="mid tool-call") as info:
            await m.request(REQ)
    assert not info.value.connection_lost


async def test_backend_killed_mid_stream(replay: ReplayServer) -> None:
    replay.script(Reply(chunks=sse_events("llamacpp_stream_tool_call.sse"), kill_after=3))
    async with model(replay, stream=True) as m:
        with pytest.raises(StreamTruncatedError) as info:
            await m.request(REQ)
    assert info.value.connection_lost


async def test_backend_killed_mid_stream_while_streaming_deltas(replay: ReplayServer) -> None:
    replay.script(Reply(chunks=sse_events("vllm_stream_tool_call.sse"), kill_after=3))
    got = []
    async with model(replay) as m:
        with pytest.raises(StreamTruncatedError):
            async for d in m.stream(REQ):
                got.append(d)  # noqa: PERF401
    assert got and got[0].tool_name == "get_weather"


async def test_first_byte_timeout(replay: ReplayServer) -> None:
    hold = asyncio.Event()
    replay.script(Reply(body=fixture_bytes("llamacpp_chat.json"), hold=hold))
    async with model(replay, timeouts=Timeouts(first_byte_s=0.2)) as m:
        with pytest.raises(ModelTimeoutError, match="no response within"):
            await m.request(REQ)
    hold.set()


async def test_own_session_is_used_and_left_open(replay: ReplayServer) -> None:
    replay.default = Reply(body=fixture_bytes("ollama_chat.json"))
    async with aiohttp.ClientSession() as session:
        async with model(replay, session=session) as m:
            r = await m.request(REQ)
        assert not session.closed
    assert r.tool_calls == (ToolCall("call_hk81qg8b", "run_command", '{"command":"ls -la"}'),)


async def test_health_uses_health_then_falls_back_to_models(replay: ReplayServer) -> None:
    async with model(replay) as m:
        assert await m.health()
        replay.healthy = False
        assert not await m.health()  # llama.cpp's 503 while loading
        replay.healthy, replay.has_health = True, False
        assert await m.health()  # Ollama: no /health, /v1/models answers


# --- odd shapes of a reply: what follows [DONE], JSON to a streamed call, an HTML page ---

_EVENTS = HELLO_EVENTS[:-1]  # all but [DONE]
_WHOLE = (
    b'{"choices":[{"message":{"content":"whole"},"finish_reason":"stop"}],"model":"m",'
    b'"usage":{"prompt_tokens":5,"completion_tokens":1}}'
)


async def test_what_follows_done_in_the_same_write_is_ignored(replay: ReplayServer) -> None:
    # [DONE] and garbage in one write: whether it failed the call depended on TCP's cut
    replay.default = Reply(chunks=[*_EVENTS, b"data: [DONE]\n\ndata: {not json\n\n"])
    async with model(replay, stream=True, retry=RetryPolicy(attempts=1)) as m:
        assert (await m.request(REQ)).content == "hello"
        deltas = [d async for d in m.stream(REQ)]
    assert deltas[-1].response is not None and deltas[-1].response.content == "hello"
    assert len(replay.requests) == 2


async def test_a_streamed_call_answered_with_one_json_reply_takes_it(
    replay: ReplayServer,
) -> None:
    # a server (or a proxy) that ignores "stream": true
    replay.default = Reply(body=_WHOLE)
    async with model(replay, stream=True) as m:
        reply = await m.request(REQ)
        deltas = [d async for d in m.stream(REQ)]
    assert reply.content == "whole" and reply.usage.output_tokens == 1
    assert [d.content for d in deltas[:-1]] == ["whole"]
    final = deltas[-1].response
    assert final is not None and final.content == "whole" and final.finish_reason == "stop"


async def test_an_html_error_page_is_cut_to_its_title(replay: ReplayServer) -> None:
    page = (
        b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title><style>body{}</style>"
        b"</head><body>" + b"<p>nginx says no</p>" * 400 + b"</body></html>"
    )
    replay.default = Reply(status=502, body=page, content_type="text/html")
    async with model(replay, retry=RetryPolicy(attempts=1)) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    said = str(info.value)
    assert said == f"{m.name}: HTTP 502: 502 Bad Gateway (an HTML page of {len(page)} bytes)"
    assert info.value.body.startswith("<!DOCTYPE html>")  # the page itself is kept


async def test_an_html_error_page_without_a_title_is_cut_to_its_first_words(
    replay: ReplayServer,
) -> None:
    page = b"<html><body><script>var x = 1;</script><h1>Service</h1> " + b"down " * 500
    replay.default = Reply(status=500, body=page + b"</body></html>", content_type="text/html")
    async with model(replay, retry=RetryPolicy(attempts=1)) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    message = info.value.message
    assert message.startswith("Service down down") and "var x" not in message
    assert len(message) < 300 and message.endswith(f"… (an HTML page of {len(page) + 14} bytes)")
