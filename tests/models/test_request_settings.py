"""What goes out on the wire: ``extra_body`` merged over the standard fields, captured by a
loopback server."""

from __future__ import annotations

import msgspec
import pytest
from backend_servers import OK_BODY, ReplayServer, Reply

from podium.errors import ConfigError
from podium.messages import Message
from podium.models import ModelRequest, ModelSettings, OpenAIChatModel, RetryPolicy
from podium.models.base import OutputSchema, ToolDefinition
from podium.models.openai_wire import RequestEncoder

pytestmark = pytest.mark.anyio

TOOLS = (ToolDefinition("lookup", "Look a word up.", {"type": "object", "properties": {}}),)
ANSWER = OutputSchema("answer", {"type": "object", "properties": {"x": {"type": "integer"}}})
MESSAGES = [Message("user", "hi")]


def _body(enc: RequestEncoder, request: ModelRequest) -> dict[str, object]:
    out: dict[str, object] = msgspec.json.decode(enc.encode(request))
    return out


@pytest.mark.parametrize(
    "extra",
    [
        {"tool_choice": "auto"},
        {"tool_choice": {"type": "function", "function": {"name": "lookup"}}},
        {"response_format": {"type": "json_object"}},
        {"tools": []},
        {"max_tokens": 7, "top_k": 3},
    ],
)
def test_extra_body_overrides_standard_fields_with_tools_and_native_output(
    extra: dict[str, object],
) -> None:
    enc = RequestEncoder("m", extra_body=extra)
    request = ModelRequest(
        MESSAGES,
        tools=TOOLS,
        settings=ModelSettings(max_tokens=5, tool_choice="required", output=ANSWER),
    )
    body = _body(enc, request)  # a TypeError here before: Raw fields and to_builtins
    for key, value in extra.items():
        assert body[key] == value
    for key in {"tools", "tool_choice", "response_format", "max_tokens"} - set(extra):
        assert key in body  # Podium's own values for what extra_body leaves alone


def test_request_extra_body_wins_over_the_endpoints() -> None:
    enc = RequestEncoder("m", extra_body={"tool_choice": "none"})
    request = ModelRequest(
        MESSAGES, tools=TOOLS, settings=ModelSettings(extra_body={"tool_choice": "auto"})
    )
    assert _body(enc, request)["tool_choice"] == "auto"


def test_extra_body_tool_choice_is_not_sent_without_tools() -> None:
    enc = RequestEncoder("m", extra_body={"tool_choice": "auto", "max_tokens": 3})
    body = _body(enc, ModelRequest(MESSAGES))
    assert "tool_choice" not in body and body["max_tokens"] == 3


@pytest.mark.parametrize("key", ["messages", "stream", "stream_options"])
def test_extra_body_may_not_set_how_the_reply_is_read(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        RequestEncoder("m", extra_body={key: None})
    enc = RequestEncoder("m")
    request = ModelRequest(MESSAGES, tools=TOOLS, settings=ModelSettings(extra_body={key: 1}))
    with pytest.raises(ConfigError, match=key):
        enc.encode(request)


async def test_captured_body_of_a_tool_call_with_extra_tool_choice(replay: ReplayServer) -> None:
    replay.default = Reply(body=OK_BODY)
    model = OpenAIChatModel(
        replay.base_url,
        "m",
        extra_body={"tool_choice": "auto", "cache_prompt": True},
        retry=RetryPolicy(attempts=1),
    )
    async with model:
        reply = await model.request(
            ModelRequest(MESSAGES, tools=TOOLS, settings=ModelSettings(tool_choice="required"))
        )
        await model.request(ModelRequest(MESSAGES))
    assert reply.content == "ok"
    with_tools, without = replay.requests
    assert with_tools["tool_choice"] == "auto" and with_tools["cache_prompt"] is True
    assert with_tools["tools"][0]["function"]["name"] == "lookup"
    assert "tool_choice" not in without and without["cache_prompt"] is True
