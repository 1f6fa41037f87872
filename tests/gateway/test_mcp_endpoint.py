"""``/mcp`` on a real ``podium serve``: the official MCP SDK's streamable-HTTP client
lists the served agents as tools and calls one; the run is the tenant's, in /v1/runs."""

from __future__ import annotations

import uuid

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import KEY_A, KEY_B, ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def call_agent(
    server: ServerProcess, key: str, agent: str, text: str, meta: dict[str, str] | None = None
) -> types.CallToolResult:
    # An instrumented client sends its W3C trace context: the run continues that trace.
    headers = {"Authorization": f"Bearer {key}", "traceparent": TRACEPARENT}
    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(f"{server.url}/mcp", http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        assert {"react", "slow", "sleepy"} <= {t.name for t in listed.tools}
        react = next(t for t in listed.tools if t.name == "react")
        assert react.input_schema["required"] == ["input"]
        return await session.call_tool(agent, {"input": text}, meta=meta)  # type: ignore[arg-type]


async def test_an_mcp_client_runs_a_durable_agent(server: ServerProcess) -> None:
    text = f"what is podium? (over mcp {uuid.uuid4().hex})"  # the server is shared
    result = await call_agent(server, KEY_A, "react", text)
    assert not result.is_error, result
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    assert texts == ["42."]
    # The run went through the gateway: journaled, and listed for this tenant only.
    with server.client(KEY_A) as http:
        runs = http.get("/v1/runs", params={"agent": "react", "limit": "100"}).json()["data"]
    mine = [r for r in runs if r["input"] == text]
    assert len(mine) == 1 and mine[0]["status"] == "completed", runs
    assert mine[0]["metadata"] == {"via": "mcp", "traceparent": TRACEPARENT}
    with server.client(KEY_A) as http:
        events = http.get(f"/v1/runs/{mine[0]['id']}/events").text
    assert "lookup" in events
    with server.client(KEY_B) as http:
        theirs = http.get("/v1/runs", params={"agent": "react", "limit": "100"}).json()["data"]
    assert all(r["input"] != text for r in theirs)


async def test_the_trace_context_in_the_calls_meta_is_preferred_to_the_header(
    server: ServerProcess,
) -> None:
    # The OpenTelemetry conventions for MCP: the call's own context is in params._meta
    # (one HTTP request is not one MCP call); the header's is the transport's.
    in_meta = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    text = f"what is podium? (traced over mcp {uuid.uuid4().hex})"
    result = await call_agent(server, KEY_A, "react", text, {"traceparent": in_meta})
    assert not result.is_error, result
    with server.client(KEY_A) as http:
        runs = http.get("/v1/runs", params={"agent": "react", "limit": "100"}).json()["data"]
    (mine,) = [r for r in runs if r["input"] == text]
    assert mine["metadata"] == {"via": "mcp", "traceparent": in_meta}


def test_mcp_needs_the_api_key(server: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(f"{server.url}/mcp", json=body, headers=headers).status_code == 401
    bad = {**headers, "Authorization": "Bearer pk_wrong"}
    assert httpx.post(f"{server.url}/mcp", json=body, headers=bad).status_code == 401


def test_mcp_reads_bodies_as_every_route_does(server: ServerProcess) -> None:
    """``server.max_body_bytes`` holds on /mcp too (a 2 MB input made a run; only the SDK's
    own 4 MB cap applied, in plain text), and its refusals have the API's error shape."""
    auth = {"Authorization": f"Bearer {KEY_A}", "Accept": "application/json, text/event-stream"}
    big = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"react",'
    big += '"arguments":{"input":"' + "x" * 2_000_000 + '"}}}'
    r = httpx.post(f"{server.url}/mcp", content=big, timeout=30,
                   headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large", r.text
    plain = {**auth, "Content-Type": "text/plain"}
    r = httpx.post(f"{server.url}/mcp", content="{}", headers=plain)
    assert r.status_code == 415 and r.json()["error"]["field"] == "content-type", r.text
    # Stateless, JSON answers: no stream to open, no session to end.
    for method in ("GET", "DELETE"):
        r = httpx.request(method, f"{server.url}/mcp", headers=auth, timeout=5)
        assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed", r.text
        assert r.headers["allow"] == "POST"
    with server.client(KEY_A) as http:
        runs = http.get("/v1/runs", params={"agent": "react", "limit": "1000"}).json()["data"]
    assert all(len(r["input"]) < 1_000_000 for r in runs)
