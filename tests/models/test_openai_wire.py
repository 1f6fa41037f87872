"""The wire protocol, sans I/O: recorded bodies and chunk streams of vLLM, llama.cpp, Ollama."""

from __future__ import annotations

import time

import msgspec
import pytest
from backend_servers import fixture_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podium.errors import ModelReplyError
from podium.messages import Message, ToolCall
from podium.models.base import ModelRequest, ModelSettings, ToolDefinition
from podium.models.openai_wire import (
    RequestEncoder,
    SSEDecoder,
    StreamAssembler,
    StreamTruncatedError,
    decode_completion,
)

TOOLS = (
    ToolDefinition(
        "get_weather",
        "Weather of a city",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
)


def assemble(raw: bytes, *, step: int | None = None, deltas: bool = False) -> StreamAssembler:
    """Feed ``raw`` in pieces of ``step`` bytes (all at once if None)."""
    sse = SSEDecoder()
    asm = StreamAssembler(backend="b", deltas=deltas)
    pieces = [raw] if step is None else [raw[i : i + step] for i in range(0, len(raw), step)]
    for n, piece in enumerate(pieces):
        for event in sse.feed(piece):
            asm.feed(event, float(n))
    for event in sse.close():
        asm.feed(event, float(len(pieces)))
    return asm


# --- request encoding -----------------------------------------------------------------


def test_request_encoding_carries_history_tools_and_settings() -> None:
    enc = RequestEncoder("qwen", extra_body={"cache_prompt": True})
    call = ToolCall("c1", "get_weather", '{"city":"Paris"}')
    req = ModelRequest(
        messages=[
            Message("system", "be brief"),
            Message("user", "weather?", tokens=3),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", "18C", tool_call_id="c1", name="get_weather"),
        ],
        tools=TOOLS,
        settings=ModelSettings(max_tokens=64, temperature=0.0, stop=("\n\n",), seed=7),
    )
    body = msgspec.json.decode(enc.encode(req, stream=True))
    assert body["model"] == "qwen"
    assert body["messages"][1] == {"role": "user", "content": "weather?"}  # no `tokens`
    assert body["messages"][2]["tool_calls"] == [
        {
            "id": "c1",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            "type": "function",
        }
    ]
    assert body["messages"][3] == {
        "role": "tool",
        "content": "18C",
        "tool_call_id": "c1",
        "name": "get_weather",
    }
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tools"][0]["type"] == "function"
    assert (body["max_tokens"], body["temperature"], body["stop"], body["seed"]) == (
        64,
        0.0,
        ["\n\n"],
        7,
    )
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["cache_prompt"] is True


def test_request_extra_body_merges_and_overrides() -> None:
    enc = RequestEncoder("m", extra_body={"top_k": 20})
    plain = msgspec.json.decode(enc.encode(ModelRequest(messages=[Message("user", "x")])))
    assert "stream" not in plain and "tools" not in plain and plain["top_k"] == 20
    req = ModelRequest(
        messages=[Message("user", "x")],
        settings=ModelSettings(
            max_tokens=5, extra_body={"max_tokens": 9, "guided_json": {"type": "object"}}
        ),
    )
    body = msgspec.json.decode(enc.encode(req))
    assert body["max_tokens"] == 9  # the request's extra_body wins over a standard field
    assert body["guided_json"] == {"type": "object"} and body["top_k"] == 20


def test_tool_schemas_are_encoded_once_per_tuple() -> None:
    enc = RequestEncoder("m")
    r1 = ModelRequest(messages=[Message("user", "a")], tools=TOOLS)
    assert enc.encode(r1) == enc.encode(r1)
    assert enc._tools(TOOLS) is enc._tools(TOOLS)


# --- non-streamed bodies ------------------------------------------------------------


def test_vllm_tool_call_body() -> None:
    r = decode_completion(fixture_bytes("vllm_chat_tool_call.json"), "vllm")
    assert r.tool_calls == (
        ToolCall(
            "chatcmpl-tool-5d1f7b2a9c8e4f3d", "get_weather", '{"city": "Paris", "unit": "celsius"}'
        ),
    )
    assert (r.content, r.finish_reason, r.model, r.backend) == (
        "",
        "tool_calls",
        "Qwen/Qwen2.5-7B-Instruct",
        "vllm",
    )
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens) == (212, 29, 0)


def test_llamacpp_body_reports_cached_tokens_from_timings() -> None:
    r = decode_completion(fixture_bytes("llamacpp_chat.json"))
    assert r.content == "Paris is the capital of France."
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens) == (190, 8, 178)


def test_ollama_body() -> None:
    r = decode_completion(fixture_bytes("ollama_chat.json"))
    assert r.tool_calls == (ToolCall("call_hk81qg8b", "run_command", '{"command":"ls -la"}'),)


def test_object_arguments_are_reencoded_as_json_text() -> None:
    call = {"function": {"name": "f", "arguments": {"a": 1}}}
    body = msgspec.json.encode(
        {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    )
    r = decode_completion(body)
    assert r.tool_calls == (ToolCall("call_0", "f", '{"a":1}'),)


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"choices": "nope"}',
        b'{"choices": []}',
        b"",
        b'{"choices":[{"message":{"content":5}}]}',
    ],
)
def test_malformed_body_is_a_reply_error(body: bytes) -> None:
    with pytest.raises(ModelReplyError):
        decode_completion(body)


def test_unparsable_arguments_and_unknown_tools_pass_through_raw() -> None:
    # the engine validates arguments against the schema and turns failures into observations
    call = {"id": "x", "function": {"name": "no_such_tool", "arguments": '{"city": Par'}}
    body = msgspec.json.encode(
        {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    )
    r = decode_completion(body)
    assert r.tool_calls == (ToolCall("x", "no_such_tool", '{"city": Par'),)


# --- SSE and streams ------------------------------------------------------------------


def test_sse_decoder_handles_crlf_comments_and_multiline_data() -> None:
    sse = SSEDecoder()
    out = sse.feed(b': ping\r\n\r\nevent: message\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata:[DONE]\n')
    assert out == [b'{"a":\n1}']
    assert sse.feed(b"\n") == [b"[DONE]"]
    assert sse.feed(b"data: partial") == [] and sse.close() == []


@pytest.mark.parametrize("step", [None, 1, 7, 64])
def test_vllm_tool_call_streamed_in_pieces(step: int | None) -> None:
    r = assemble(fixture_bytes("vllm_stream_tool_call.sse"), step=step).finish()
    assert r.tool_calls == (
        ToolCall("chatcmpl-tool-7c2e9a", "get_weather", '{"city": "Paris", "unit": "celsius"}'),
    )
    assert r.finish_reason == "tool_calls" and r.usage.output_tokens == 29
    assert r.ttft_s is not None and len(r.token_times_s) == 4  # name delta + three argument pieces


def test_vllm_text_stream_timing_and_cached_tokens() -> None:
    r = assemble(fixture_bytes("vllm_stream_text.sse"), step=50).finish()
    assert r.content == "It is 18°C in Paris."
    assert r.usage.cached_tokens == 240
    assert list(r.token_times_s) == sorted(r.token_times_s) and r.ttft_s == r.token_times_s[0]


def test_llamacpp_tool_call_stream() -> None:
    r = assemble(fixture_bytes("llamacpp_stream_tool_call.sse"), step=13).finish()
    assert r.tool_calls == (
        ToolCall("Yk2pQv8nZ3xW1rT6", "get_weather", '{"city":"Paris","unit":"celsius"}'),
    )
    assert (r.usage.input_tokens, r.usage.cached_tokens) == (190, 178)


def test_ollama_parallel_tool_calls_stream() -> None:
    asm = assemble(fixture_bytes("ollama_stream_tool_calls.sse"), deltas=True)
    r = asm.finish()
    assert [c.arguments for c in r.tool_calls] == ['{"command":"ls"}', '{"command":"ls -l"}']
    assert [c.id for c in r.tool_calls] == ["call_wteop8bt", "call_rk2xye1l"]


def test_ollama_text_stream_with_finish_on_content_chunk() -> None:
    r = assemble(fixture_bytes("ollama_stream_text.sse")).finish()
    assert (r.content, r.finish_reason) == ("My name is Qwen.", "stop")


def test_new_id_at_a_used_index_starts_a_new_call() -> None:
    asm = StreamAssembler()
    for cid in ("a", "b"):
        chunk = {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": cid, "function": {"name": "f", "arguments": "{}"}}
                        ]
                    }
                }
            ]
        }
        asm.feed(msgspec.json.encode(chunk), 0.0)
    asm.feed(b'{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}', 0.1)
    assert [c.id for c in asm.finish().tool_calls] == ["a", "b"]


def test_deltas_are_emitted_when_asked() -> None:
    sse, asm = SSEDecoder(), StreamAssembler(deltas=True)
    deltas = [
        d for e in sse.feed(fixture_bytes("vllm_stream_tool_call.sse")) for d in asm.feed(e, 0.0)
    ]
    assert deltas[0].tool_name == "get_weather" and deltas[0].tool_call_id == "chatcmpl-tool-7c2e9a"
    assert "".join(d.arguments for d in deltas) == '{"city": "Paris", "unit": "celsius"}'


def test_stream_ending_mid_tool_call_is_truncated() -> None:
    raw = fixture_bytes("vllm_stream_tool_call.sse")
    cut = raw[: raw.index(b"Paris") + 20]
    with pytest.raises(StreamTruncatedError, match="mid tool-call") as info:
        assemble(cut).finish()
    assert not info.value.connection_lost
    with pytest.raises(StreamTruncatedError, match="connection lost"):
        assemble(cut).finish(connection_lost=True)


def test_invalid_json_chunk_is_a_reply_error() -> None:
    with pytest.raises(ModelReplyError, match="invalid stream chunk"):
        assemble(b'data: {"choices":[{"delta":\n\n')


def test_error_event_in_stream_is_a_reply_error() -> None:
    with pytest.raises(ModelReplyError, match="backend error in stream: overloaded"):
        assemble(b'data: {"error":{"message":"overloaded","code":500}}\n\n')


def test_streamed_tool_call_without_name_is_a_reply_error() -> None:
    delta = {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
    chunk = {"choices": [{"delta": delta, "finish_reason": "tool_calls"}]}
    raw = b"data: " + msgspec.json.encode(chunk) + b"\n\n"
    with pytest.raises(ModelReplyError, match="has no name"):
        assemble(raw).finish()


# --- hostile streams ------------------------------------------------------------------


def _tool_chunk(*calls: dict[str, object], finish: str | None = None) -> bytes:
    choice: dict[str, object] = {"delta": {"tool_calls": list(calls)}}
    if finish:
        choice["finish_reason"] = finish
    return b"data: " + msgspec.json.encode({"choices": [choice]}) + b"\n\n"


_FINISH_TOOLS = b'data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}\n\n'


def test_a_first_tool_call_at_index_1_is_the_only_call() -> None:
    # an index gap used to leave an empty call at 0 ("has no name"): the run failed
    raw = _tool_chunk({"index": 1, "id": "a", "function": {"name": "f", "arguments": "{}"}})
    r = assemble(raw + _FINISH_TOOLS).finish()
    assert r.tool_calls == (ToolCall("a", "f", "{}"),)


def test_pieces_without_id_go_to_the_call_their_index_last_started() -> None:
    # every call at index 0, a new id each, arguments in later id-less pieces: the second
    # call's pieces used to be appended to the first ('{"x":1}2}')
    raw = b"".join(
        [
            _tool_chunk({"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}),
            _tool_chunk({"index": 0, "function": {"arguments": "1}"}}),
            _tool_chunk({"index": 0, "id": "b", "function": {"name": "g", "arguments": '{"y":'}}),
            _tool_chunk({"index": 0, "function": {"arguments": "2}"}}),
            _FINISH_TOOLS,
        ]
    )
    asm = assemble(raw, deltas=True)
    r = asm.finish()
    assert r.tool_calls == (ToolCall("a", "f", '{"x":1}'), ToolCall("b", "g", '{"y":2}'))


def test_interleaved_calls_by_index_and_by_repeated_id() -> None:
    raw = b"".join(
        [
            _tool_chunk(
                {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
                {"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"q":'}},
            ),
            _tool_chunk({"index": 0, "function": {"arguments": '{"p":1}'}}),
            _tool_chunk({"index": 1, "id": "b", "function": {"arguments": "2}"}}),
            _FINISH_TOOLS,
        ]
    )
    r = assemble(raw, step=5).finish()
    assert r.tool_calls == (ToolCall("a", "f", '{"p":1}'), ToolCall("b", "g", '{"q":2}'))


def test_a_string_error_event_keeps_its_message() -> None:
    with pytest.raises(ModelReplyError, match="backend error in stream: model 'x' not found"):
        assemble(b'data: {"error":"model \'x\' not found"}\n\n')


def test_a_line_that_never_ends_is_bounded_and_costs_its_length() -> None:
    # 64 MiB without a newline in 64 KiB reads: the held line used to be copied and split
    # again on every read (seconds of a blocked event loop), and held whole
    sse = SSEDecoder(max_event_bytes=64 * 1024 * 1024)
    piece = b"x" * 65536
    start = time.perf_counter()
    with pytest.raises(ModelReplyError, match="longer than"):
        for _ in range(1025):
            sse.feed(piece)
    assert time.perf_counter() - start < 1.0


def test_an_event_that_never_ends_is_bounded() -> None:
    sse = SSEDecoder(max_event_bytes=4096)
    with pytest.raises(ModelReplyError, match="longer than 4096 bytes"):
        for _ in range(1000):
            sse.feed(b"data: " + b"x" * 10 + b"\n")


def _stream_bytes(text: bytes, crlf: bool) -> bytes:
    return text.replace(b"\n", b"\r\n") if crlf else text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(
        [
            "vllm_stream_tool_call.sse",
            "vllm_stream_text.sse",
            "llamacpp_stream_tool_call.sse",
            "ollama_stream_tool_calls.sse",
            "ollama_stream_text.sse",
        ]
    ),
    crlf=st.booleans(),
    pings=st.booleans(),
    cuts=st.lists(st.floats(0.0, 1.0), max_size=40),
)
def test_any_split_of_a_stream_gives_the_same_reply(
    name: str, crlf: bool, pings: bool, cuts: list[float]
) -> None:
    raw = fixture_bytes(name)
    if pings:  # keep-alive comments between the events
        raw = raw.replace(b"\n\n", b"\n\n: keep-alive\n\n")
    raw = _stream_bytes(raw, crlf)
    whole = assemble(raw).finish()
    points = sorted({int(c * len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    sse, asm = SSEDecoder(), StreamAssembler(backend="b")
    for piece in pieces:  # cut anywhere: mid-line, mid-"data:", between \r and \n, mid-UTF-8
        for event in sse.feed(piece):
            asm.feed(event, 0.0)
    for event in sse.close():
        asm.feed(event, 0.0)
    split = asm.finish()
    assert (split.content, split.tool_calls, split.reasoning, split.finish_reason) == (
        whole.content,
        whole.tool_calls,
        whole.reasoning,
        whole.finish_reason,
    )
    assert split.usage == whole.usage and len(split.token_times_s) == len(whole.token_times_s)
