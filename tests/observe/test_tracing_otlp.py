"""A `podium worker` configured only by the standard OTEL_* variables exports its spans over
OTLP/HTTP, continuing the trace context its run carries (as the gateway stores it)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore, connect

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_worker_exports_its_runs_spans_to_an_otlp_collector(
    redis_url: str, prefix: str
) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        client = connect(redis_url)
        store, queue = RedisRunStore(client, prefix=prefix), RedisQueue(client, prefix=prefix)
        await store.create(RunRecord("run_otlp_1", "support", "A-1?",
                                     metadata={"traceparent": f"00-{TRACE}-{PARENT}-01"}))
        await queue.submit(QueueItem("run_otlp_1", "support"))
        await queue.aclose()
        await store.aclose()
        await client.aclose()
        env = subprocess_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                             OTEL_SERVICE_NAME="podium-test-worker")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podium.cli.main", "worker", "--burst", "--redis", redis_url,
            "--prefix", prefix, "--agent", "observe_agents:support", "--log-level", "WARNING",
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out.decode()
    finally:
        await runner.cleanup()
    spans = [
        (span, rs.resource)
        for request in received
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    names = {span.name for span, _ in spans}
    assert {"invoke_agent support", "step 0", "step 1", "chat scripted",
            "execute_tool lookup"} <= names, names
    assert {span.trace_id.hex() for span, _ in spans} == {TRACE}
    run = next(span for span, _ in spans if span.name == "invoke_agent support")
    assert run.parent_span_id.hex() == PARENT
    service = {a.value.string_value for _, r in spans for a in r.attributes
               if a.key == "service.name"}
    assert service == {"podium-test-worker"}
