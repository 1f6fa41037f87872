"""The gateway's server span covers the request it serves: a ``wait: true`` request's
``POST /v1/runs`` span lasts until the run it waited for ended, not until its submission,
and keeps the attributes it started with under Podium's default sampler."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conftest import gateway_client
from podium.observe.sampling import RateLimitedSampler
from podium.observe.tracing import RunTracer

pytestmark = pytest.mark.anyio


async def test_a_wait_requests_server_span_ends_after_its_run() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RateLimitedSampler())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with gateway_client() as (gw, client):
        gw.tracer = RunTracer(provider)  # as OTEL_* would configure it
        resp = await client.post("/v1/runs", json={"agent": "slow", "input": "go", "wait": True})
        assert resp.status_code == 200, resp.text
        run = resp.json()
    assert run["status"] == "completed" and run["finished_at"]
    (server,) = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/runs"]
    assert server.kind == SpanKind.SERVER
    assert server.end_time is not None and server.start_time is not None
    assert server.end_time >= int(run["finished_at"] * 1e9)
    # The default sampler kept what the span was started with.
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v1/runs"
    assert server.attributes["gen_ai.agent.name"] == "slow"
