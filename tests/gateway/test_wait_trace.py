"""The gateway's server span covers the request it serves: a ``wait: true`` request's
``POST /v1/runs`` span lasts until the run it waited for ended, a streamed one until its
last event was sent (not until its submission), and both keep the attributes they started
with under Podium's default sampler; every span of the trace ends inside its parent."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conftest import gateway_client
from podium.engine.hook import combine
from podium.observe.sampling import RateLimitedSampler
from podium.observe.tracing import RunTracer

pytestmark = pytest.mark.anyio


def _traced() -> tuple[InMemorySpanExporter, RunTracer]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RateLimitedSampler())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, RunTracer(provider)  # as OTEL_* would configure it


def _nested(spans: tuple[ReadableSpan, ...]) -> None:
    """Every span whose parent is in ``spans`` starts and ends inside it."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span in spans:
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        if parent is None:
            continue
        assert span.start_time is not None and span.end_time is not None
        assert parent.start_time is not None and parent.end_time is not None
        assert parent.start_time <= span.start_time, (span.name, parent.name)
        assert span.end_time <= parent.end_time, (span.name, parent.name)


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/runs", {"agent": "slow", "input": "go", "wait": True}),
    ("/v1/runs", {"agent": "slow", "input": "go", "stream": True}),
    ("/v1/chat/completions", {"model": "slow", "messages": [{"role": "user", "content": "go"}]}),
    ("/v1/chat/completions", {"model": "slow", "stream": True,
                              "messages": [{"role": "user", "content": "go"}]}),
]


@pytest.mark.parametrize(("route", "body"), REQUESTS,
                         ids=["runs-wait", "runs-stream", "chat", "chat-stream"])
async def test_a_requests_server_span_ends_after_the_run_it_serves(
    route: str, body: dict[str, Any]
) -> None:
    exporter, tracer = _traced()
    async with gateway_client() as (gw, client):
        gw.tracer = tracer
        gw.engine.hook = combine(gw.engine.hook, tracer)  # the embedded engine's run spans
        resp = await client.post(route, json=body)  # (the transport reads the body whole)
        assert resp.status_code == 200, resp.text
    spans = exporter.get_finished_spans()
    (server,) = [s for s in spans if s.name == f"POST {route}"]
    (run,) = [s for s in spans if s.name == "invoke_agent slow"]
    assert server.kind == SpanKind.SERVER
    assert run.parent is not None and server.context is not None
    assert run.parent.span_id == server.context.span_id
    assert server.end_time is not None and run.end_time is not None
    assert server.end_time >= run.end_time  # the response was over after its run
    assert {s.name for s in spans} >= {"step 0", "step 2", "chat simulated"}
    _nested(spans)
    # The default sampler kept what the span was started with; the status is the answer's.
    assert server.attributes is not None
    assert server.attributes["http.route"] == route
    assert server.attributes["gen_ai.agent.name"] == "slow"
    assert server.attributes["http.response.status_code"] == 200


async def test_a_submitted_runs_server_span_ends_with_its_202() -> None:
    """Without a wait the request is over at submission: its span ends with the 202 (the run
    it started goes on, in the same trace)."""
    exporter, tracer = _traced()
    async with gateway_client() as (gw, client):
        gw.tracer = tracer
        resp = await client.post("/v1/runs", json={"agent": "slow", "input": "go"})
        assert resp.status_code == 202, resp.text
        (server,) = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/runs"]
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 202
