"""MCP servers that misbehave, as real subprocesses: each failure is bounded, names the
server, leaves the worker (this test process) well, and a later call works.

The servers are ``mcp_servers/hostile_server.py`` (stdio) and ``hostile_http_server.py``
(streamable HTTP), raw JSON-RPC that misbehaves as their MODE argument says.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from podium.config import load_config
from podium.errors import ConfigError, RetryableToolError
from podium.factory import served_agents
from podium.security import EgressPolicy
from podium.tools import ToolContext, ToolExecutor, ToolResult
from podium.tools.mcp import MCPServer, MCPToolError
from serve_process import mcp_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# One loop: the MCP client runs on anyio over subprocess pipes and HTTP, and what these
# pin is its handling of a server's misbehaviour, the same on either loop.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

SERVERS = Path(__file__).with_name("mcp_servers")
HOSTILE = str(SERVERS / "hostile_server.py")
HOSTILE_HTTP = str(SERVERS / "hostile_http_server.py")
DEMO = str(SERVERS / "demo_server.py")


def hostile(mode: str, **options: object) -> MCPServer:
    options = {"timeout": 1.0, "retries": 0, **options}
    return MCPServer.stdio(sys.executable, [HOSTILE, mode], name=mode, **options)  # type: ignore[arg-type]


@pytest.fixture
async def executor() -> AsyncIterator[ToolExecutor]:
    pool = ToolExecutor(max_threads=1)
    yield pool
    pool.close()


async def poke(server: MCPServer, executor: ToolExecutor) -> ToolResult:
    tool = next(t for t in await server.list_tools() if t.name == "poke")
    return await executor.execute(tool, tool.decode_arguments("{}"), ToolContext("r", 0, 0, "c"))


def no_tasks_left() -> None:
    mine = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not mine and t.get_name().startswith("mcp:")]
    assert not left, left


# -- 1. silence ------------------------------------------------------------------------------


async def test_a_server_that_never_answers_initialize_fails_in_time_and_closes() -> None:
    server = hostile("no-init")
    try:  # the message says the 1 s bound fired (a busy machine's seconds are not timed)
        with pytest.raises(RetryableToolError, match="no answer to initialize within 1s"):
            await server.list_tools()
    finally:
        await asyncio.wait_for(server.aclose(), 5)  # it used to wait for ever
    no_tasks_left()


@pytest.mark.parametrize("mode", ["hang", "wrong-id"])
async def test_a_call_never_answered_times_out_and_the_session_goes_on(
    mode: str, executor: ToolExecutor
) -> None:
    server = hostile(mode, retries=1)
    try:
        result = await poke(server, executor)
        # two attempts, each ended by its own timeout
        assert not result.ok and result.error == "timeout" and result.attempts == 2
        # The message names the timeout that fired: the server's (the tool's), not a
        # timeout inside the session.
        assert "tool 'poke' timed out after 1.0s" in result.content, result.content
        assert server.connects == 1  # a slow call is no broken connection
    finally:
        await server.aclose()
    no_tasks_left()


# -- 2. crashes and garbage ------------------------------------------------------------------


async def test_a_server_that_exits_mid_call_is_named_and_started_again(
    executor: ToolExecutor,
) -> None:
    server = hostile("exit", retries=1)
    try:
        result = await poke(server, executor)
        assert not result.ok and result.attempts == 2
        assert "MCP server 'exit' failed during 'poke': it exited (status 5)" in result.content
        assert server.connects == 2  # the listing's session took the first attempt
    finally:
        await server.aclose()
    no_tasks_left()


@pytest.mark.parametrize("mode", ["huge", "endless"])
async def test_an_oversized_line_ends_the_session_with_bounded_memory(
    mode: str, executor: ToolExecutor
) -> None:
    server = hostile(mode, timeout=5.0, max_message_bytes=1_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        result = await poke(server, executor)
        # "exception", not the 5 s "timeout": the line is refused as it arrives
        assert not result.ok and result.error == "exception"
        assert f"MCP server {mode!r} failed during 'poke': it wrote a message over " \
               "1000000 bytes" in result.content
    finally:
        await asyncio.wait_for(server.aclose(), 3)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 40, grown_mb
    no_tasks_left()


async def test_lines_that_are_not_json_rpc_are_dropped(
    executor: ToolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    server = hostile("garbage")
    try:
        result = await poke(server, executor)
        assert result.ok and result.content == "poked"
    finally:
        await server.aclose()
    warned = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(warned) == 1 and "'garbage'" in warned[0].getMessage()


async def test_a_notification_flood_is_absorbed(executor: ToolExecutor) -> None:
    server = hostile("flood", timeout=60.0)  # absorbing it takes a loaded machine a while
    try:
        result = await poke(server, executor)
        assert result.ok and result.content == "poked"
    finally:
        await server.aclose()


# -- 3. protocol abuse -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("bad-result", "answered 'poke' with an invalid result: content: Input should be a "
                       "valid list"),
        ("unknown-content", "answered 'poke' with an invalid result: content[1] is not a "
                            "text, image, audio, resource or resource_link block"),
    ],
)
async def test_a_malformed_result_fails_the_call_not_the_session(
    mode: str, why: str, executor: ToolExecutor
) -> None:
    server = hostile(mode, retries=2)
    try:
        result = await poke(server, executor)
        assert not result.ok and f"MCPToolError: MCP server {mode!r} {why}" in result.content
        assert result.attempts == 1  # the tool ran: its answer is wrong, not the wire
        again = await poke(server, executor)
        assert not again.ok and server.connects == 1  # the same session answered again
    finally:
        await server.aclose()


async def test_media_blocks_are_named_not_inlined(executor: ToolExecutor) -> None:
    server = hostile("odd-content")
    try:
        result = await poke(server, executor)
        assert result.ok
        assert result.content == (
            "[image image/png 3 bytes, not shown]\n[audio audio/wav 3 bytes, not shown]\ninside"
        )
    finally:
        await server.aclose()


async def test_sampling_requests_are_refused_to_the_server(executor: ToolExecutor) -> None:
    server = hostile("sampling")
    try:
        result = await poke(server, executor)
        assert result.ok and "Sampling not supported" in result.content
    finally:
        await server.aclose()


async def test_colliding_tool_names_in_one_listing_are_refused() -> None:
    server = hostile("many-tools", timeout=5.0)
    try:
        with pytest.raises(
            MCPToolError,
            match="MCP server 'many-tools' lists more than one tool named 'a_b_c_d', 'poke'",
        ):
            await server.list_tools()
    finally:
        await server.aclose()


async def test_a_listing_that_pages_on_for_ever_is_cut_off() -> None:
    server = hostile("endless-list", timeout=5.0)
    try:
        with pytest.raises(MCPToolError, match="'endless-list' lists over 10000 tools"):
            await server.list_tools()
    finally:
        await server.aclose()


def test_an_mcp_tool_named_like_a_local_tool_is_refused_at_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "clash_tools.py").write_text(
        "from podium import tool\n\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        "    return a + b\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "podium.toml"
    path.write_text(f"""
[[models]]
name = "sim"
model = "podium-sim"

[[mcp_servers]]
name = "demo"
command = {sys.executable!r}
args = [{DEMO!r}, "stdio"]
timeout = 20

[[agents]]
name = "helper"
model = "sim"
tools = ["clash_tools:add", "demo:*"]
""")
    with pytest.raises(ConfigError) as info:
        served_agents(load_config(path, environ={}))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "agents: 'helper' has two tools named 'add' (clash_tools.add and MCP server 'demo')"
    ), message


# -- 4. streamable HTTP ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ok_http() -> Iterator[str]:
    with mcp_http_server(HOSTILE_HTTP, "ok") as url:
        yield url


def http(url: str, name: str, **options: object) -> MCPServer:
    options = {"timeout": 2.0, "retries": 0, **options}
    return MCPServer.http(url, policy=EgressPolicy.loopback(), name=name, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "retried", "why"),
    [
        ("404", True, "RetryableToolError: MCP server '404' failed during 'poke': HTTP 404 Not "
                      "Found from http://127.0.0.1:"),
        ("500", True, "RetryableToolError: MCP server '500' failed during 'poke': HTTP 500 "
                      "Internal Server Error from"),
        ("401", False, "MCPToolError: MCP server '401' answered 'poke' with an error: HTTP 401 "
                       "Unauthorized from"),
    ],
)
async def test_http_error_statuses_are_named(
    mode: str, retried: bool, why: str, executor: ToolExecutor
) -> None:
    with mcp_http_server(HOSTILE_HTTP, mode) as url:
        server = http(url, mode, retries=1)
        try:
            result = await poke(server, executor)
        finally:
            await server.aclose()
    assert not result.ok and why in result.content, result.content
    assert result.attempts == (2 if retried else 1)
    no_tasks_left()


async def test_a_stalled_sse_stream_times_out(executor: ToolExecutor) -> None:
    with mcp_http_server(HOSTILE_HTTP, "stall") as url:
        server = http(url, "stall", timeout=1.0)
        try:
            result = await poke(server, executor)
        finally:
            await server.aclose()
    assert not result.ok and result.error == "timeout"
    assert "tool 'poke' timed out after 1.0s" in result.content, result.content


async def test_a_huge_http_answer_is_cut_off(executor: ToolExecutor) -> None:
    with mcp_http_server(HOSTILE_HTTP, "huge") as url:
        server = http(url, "huge", timeout=10.0, max_message_bytes=1_000_000)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            result = await poke(server, executor)
        finally:
            await server.aclose()
    assert not result.ok and "answered with over 1000000 bytes" in result.content
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 40


async def test_a_redirect_to_another_host_is_not_followed(
    ok_http: str, executor: ToolExecutor
) -> None:
    elsewhere = ok_http.replace("127.0.0.1", "localhost")  # allowed by the policy, even
    with mcp_http_server(HOSTILE_HTTP, f"redirect:{elsewhere}") as url:
        server = http(url, "moved")
        try:
            result = await poke(server, executor)
        finally:
            await server.aclose()
    assert not result.ok and result.attempts == 1
    assert "MCP server 'moved' answered 'poke' with an error: Redirect to " in result.content
    assert "not followed" in result.content
