"""Trace context across MCP, both ways (the OpenTelemetry semantic conventions for MCP:
W3C ``traceparent``/``tracestate`` in a request's ``params._meta``).

Out: a traced run's ``tools/call`` to a real MCP server (a subprocess, over stdio and over
streamable HTTP) carries the run's context, an untraced one nothing. In: a ``tools/call``
to Podium's own MCP servers (the gateway's ``/mcp``, :func:`agents_mcp_server`) with
``_meta.traceparent`` runs the agent in that trace."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from observe_agents import support
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.hook import combine
from podium.messages import Message
from podium.observe.tracing import RunTracer
from podium.security import EgressPolicy
from podium.tools.mcp import MCPServer
from serve_process import mcp_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = str(Path(__file__).with_name("mcp_meta_server.py"))
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _tracer(ratio: float = 1.0) -> tuple[RunTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RunTracer(provider), exporter


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with mcp_http_server(SERVER) as url:
        yield url


def _server(transport: str, http_url: str) -> MCPServer:
    if transport == "stdio":
        return MCPServer.stdio(sys.executable, [SERVER, "stdio"], name="meta")
    return MCPServer.http(http_url, name="meta", policy=EgressPolicy.loopback())


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_traced_runs_mcp_calls_carry_its_context_in_meta(
    transport: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("http_url") if transport == "http" else ""
    server = _server(transport, url)
    seen: list[dict[str, str | None]] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("trace_seen", "{}"))
        seen.append(json.loads(messages[-1].content))
        return "done"

    traced, exporter = _tracer()
    unsampled, dropped = _tracer(ratio=0.0)
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
              "tracestate": "rojo=00f067aa0ba902b7"}
    try:
        agent = Agent("mcp-caller", FunctionModel(reply, name="m"),
                      tools=await server.list_tools())
        async with Engine() as engine:
            await engine.run(agent, "go")  # tracing off
            engine.hook = traced
            await engine.run(agent, "go")  # a root run, traced
            await engine.run(agent, "go", metadata=caller)  # continues its caller's trace
            engine.hook = unsampled
            await engine.run(agent, "go")  # not sampled: no context, none left from before
    finally:
        await server.aclose()
    assert len(seen) == 4 and server.connects == 1, seen  # one session served every run
    off, root, continued, not_sampled = seen
    assert off == not_sampled == {"traceparent": None, "tracestate": None, "header": None}
    assert dropped.get_finished_spans() == ()
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "invoke_agent mcp-caller"]
    assert len(runs) == 2
    for run, got in zip(runs, (root, continued), strict=True):
        traceparent = str(got["traceparent"])
        version, trace_id, parent_id, flags = traceparent.split("-")
        assert version == "00" and int(flags, 16) & 1  # sampled
        assert trace_id == f"{run.context.trace_id:032x}"
        same_trace = {f"{s.context.span_id:016x}" for s in spans
                      if s.context.trace_id == run.context.trace_id}
        assert parent_id in same_trace  # a span of the run's trace: the call's own
        calls = [s for s in spans if s.name == "execute_tool trace_seen"
                 and s.context.trace_id == run.context.trace_id]
        assert parent_id == f"{calls[0].context.span_id:016x}"  # (one call per run)
        assert got["header"] is None  # in the MCP message, not on the shared transport
    assert root["tracestate"] is None
    assert continued["traceparent"] is not None
    assert str(continued["traceparent"]).split("-")[1] == CALLER_TRACE
    assert continued["tracestate"] == "rojo=00f067aa0ba902b7"


def _run_span(spans: Sequence[ReadableSpan], agent: str) -> ReadableSpan:
    (run,) = [s for s in spans if s.name == f"invoke_agent {agent}"]
    return run


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_tools_call_to_the_gateways_mcp_continues_the_trace_in_its_meta() -> None:
    from podium.config import load_config
    from podium.gateway.app import create_app
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.store.memory import MemoryRunStore

    header_trace, header_span = "11111111111111111111111111111111", "2222222222222222"
    config = load_config(None, {"PODIUM_KEYS": "pk_mcp_trace=tenant-a"})
    tracer, exporter = _tracer()
    gw = build_gateway(config, [ServedAgent(support())], store=MemoryRunStore())
    await gw.start()
    gw.tracer = tracer  # as OTEL_* would configure it
    gw.engine.hook = combine(gw.engine.hook, tracer)  # type: ignore[union-attr]
    app = create_app(gw, manage_lifecycle=False)
    # The call's own context in _meta, and a different one on the HTTP request.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "support", "arguments": {"input": "where is A-1?"},
        "_meta": {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}}}
    headers = {"Authorization": "Bearer pk_mcp_trace",
               "Accept": "application/json, text/event-stream",
               "traceparent": f"00-{header_trace}-{header_span}-01"}
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://podium.test") as c:
                resp = await c.post("/mcp", json=body, headers=headers)
    finally:
        await gw.stop()
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"]["isError"] is False, resp.text
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {CALLER_TRACE}
    (call,) = [s for s in spans if s.name == "POST /mcp"]
    assert call.parent is not None and f"{call.parent.span_id:016x}" == CALLER_SPAN
    # The HTTP request's context is linked, as the conventions ask.
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}")
            for link in call.links] == [(header_trace, header_span)]
    run = _run_span(spans, "support")
    assert run.parent is not None and run.parent.span_id == call.context.span_id


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_agents_served_over_mcp_continue_the_trace_in_meta() -> None:
    from mcp.client.client import Client

    from podium.tools.mcp_serve import agents_mcp_server

    tracer, exporter = _tracer()
    server = agents_mcp_server([support()], tracer=tracer)
    meta = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    async with Client(server) as client:
        result = await client.call_tool("support", {"input": "where is A-1?"},
                                        meta=meta)  # type: ignore[arg-type]
    assert not result.is_error, result
    run = _run_span(exporter.get_finished_spans(), "support")
    assert f"{run.context.trace_id:032x}" == CALLER_TRACE
    assert run.parent is not None and f"{run.parent.span_id:016x}" == CALLER_SPAN


def test_a_malformed_or_oversized_context_in_meta_is_not_taken() -> None:
    from podium.observe.tracing import meta_carrier

    headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert meta_carrier({"traceparent": good, "tracestate": "a=1", "other": "x"}, headers) == {
        "traceparent": good, "tracestate": "a=1"}
    assert meta_carrier({"traceparent": good, "tracestate": "a" * 9000}, headers) == {
        "traceparent": good}  # what is too long is dropped
    for bad in ("not-a-traceparent", good.upper(), good + "-" + "x" * 9000, 42, None):
        assert meta_carrier({"traceparent": bad}, headers) is headers
    assert meta_carrier(None, headers) is headers
