"""What goes out on the wire: ``extra_body`` merged over the standard fields, captured by a
loopback server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from backend_servers import OK_BODY, ReplayServer, Reply

from podium.config import load_config
from podium.errors import ConfigError, ModelTimeoutError
from podium.factory import build_models
from podium.messages import Message
from podium.models import ModelRequest, ModelSettings, OpenAIChatModel, RetryPolicy, Timeouts
from podium.models.base import OutputSchema, ToolDefinition
from podium.models.openai_wire import RequestEncoder
from podium.models.pool import BackendPool
from podium.models.server_kinds import server_profile

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


# --- [[models]] keys and server kinds ------------------------------------------------


def _pool(tmp_path: Path, entries: str) -> BackendPool:
    config = tmp_path / "podium.toml"
    config.write_text(entries)
    pool = build_models(load_config(config, environ={}), {})["m"]
    assert isinstance(pool, BackendPool)
    return pool


def _entry(url: str, extra: str = "") -> str:
    return f'[[models]]\nname = "m"\nmodel = "x"\nbase_url = "{url}"\n{extra}\n'


async def test_model_keys_reach_the_captured_body(replay: ReplayServer, tmp_path: Path) -> None:
    replay.default = Reply(body=OK_BODY)
    replay.has_health = False
    replay.has_openapi = True
    keys = 'kind = "llama-cpp-python"\nmax_tokens = 64\ntemperature = 0.25\n'
    answer_tool = (ToolDefinition(ANSWER.name, "The answer.", ANSWER.schema),)
    tool_mode = msgspec.structs.replace(ANSWER, mode="tool")
    async with _pool(tmp_path, _entry(replay.base_url, keys)) as pool:
        await pool.request(ModelRequest(MESSAGES, settings=ModelSettings(output=ANSWER)))
        await pool.request(
            ModelRequest(MESSAGES, tools=answer_tool, settings=ModelSettings(output=tool_mode))
        )
        await pool.request(ModelRequest(MESSAGES, settings=ModelSettings(max_tokens=3)))
    native, forced, own = replay.requests
    # llama-cpp-python refuses json_schema (a 500): json_object with the schema beside it
    assert native["response_format"] == {"type": "json_object", "schema": ANSWER.schema}
    assert (native["max_tokens"], native["temperature"]) == (64, 0.25)
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "answer"}}
    assert own["max_tokens"] == 3  # the agent's own value wins over the endpoint's
    # its probe never touches /v1/models, which interrupts a generation there
    assert "/v1/models" not in replay.probed and "/openapi.json" in replay.probed


@pytest.mark.parametrize(
    ("kind", "choice", "fmt"),
    [
        ("vllm", "required", "json_schema"),
        ("llamacpp", "required", "json_object"),
        ("ollama", None, "json_schema"),
        ("tgi", "required", "json_object"),
        (None, None, "json_schema"),
    ],
)
def test_each_kind_forces_tools_and_asks_for_structure_its_way(
    kind: str | None, choice: str | None, fmt: str
) -> None:
    profile = server_profile(kind)
    enc = RequestEncoder("m", profile=profile)
    tool_mode = msgspec.structs.replace(ANSWER, mode="tool")
    answer_tool = ToolDefinition(ANSWER.name, "The answer.", ANSWER.schema)
    body = _body(enc, ModelRequest(MESSAGES, tools=(*TOOLS, answer_tool),
                                   settings=ModelSettings(output=tool_mode)))
    assert body.get("tool_choice") == choice
    native = _body(enc, ModelRequest(MESSAGES, settings=ModelSettings(output=ANSWER)))
    assert native["response_format"]["type"] == fmt  # type: ignore[index]


def test_response_format_none_asks_with_a_tool() -> None:
    model = OpenAIChatModel("http://127.0.0.1:1/v1", "m", response_format="none")
    assert model.structured_output == "tool"
    enc = RequestEncoder("m", response_format="none")
    assert "response_format" not in _body(
        enc, ModelRequest(MESSAGES, settings=ModelSettings(output=ANSWER))
    )


def test_pool_keys_must_agree_across_a_names_entries(tmp_path: Path) -> None:
    entries = _entry("http://127.0.0.1:1/v1", "cooldown_s = 5") + _entry(
        "http://127.0.0.1:2/v1"
    )
    with pytest.raises(ConfigError, match="cooldown_s"):
        _pool(tmp_path, entries)


def test_pool_keys_reach_the_pool(tmp_path: Path) -> None:
    keys = (
        "health_interval_s = 1.5\nhealth_timeout_s = 0.5\nunhealthy_after = 3\n"
        "healthy_after = 2\ncooldown_s = 7\nhealthy_wait_s = 0\ncapacity = 3\n"
        "first_token_timeout_s = 4\nidle_timeout_s = 9\n"
    )
    pool = _pool(tmp_path, _entry("http://127.0.0.1:1/v1", keys))
    assert (pool.health_interval_s, pool.health_timeout_s, pool.unhealthy_after) == (1.5, 0.5, 3)
    assert (pool.healthy_after, pool.eject_s, pool.healthy_wait_s) == (2, 7, 0)
    backend = pool.backends[0]
    assert backend.capacity == 3
    assert isinstance(backend.model, OpenAIChatModel)
    assert backend.model.timeouts.first_token_s == 4 and backend.model.timeouts.token_idle_s == 9


async def test_health_check_false_takes_the_endpoint_as_up(tmp_path: Path) -> None:
    pool = _pool(tmp_path, _entry("http://127.0.0.1:1/v1", "health_check = false"))
    async with pool:
        await pool.start()
        assert pool.backends[0].state == "healthy"


async def test_first_token_timeout_cuts_a_stream_that_makes_no_progress(
    replay: ReplayServer,
) -> None:
    held = asyncio.Event()
    replay.script(Reply(chunks=[], hold=held))
    model = OpenAIChatModel(
        replay.base_url, "m", timeouts=Timeouts(first_token_s=0.2), retry=RetryPolicy(attempts=1)
    )
    try:
        async with model:
            with pytest.raises(ModelTimeoutError, match=r"first_token_s=0\.2"):
                async for _ in model.stream(ModelRequest(MESSAGES)):
                    pass
    finally:
        held.set()
