"""Real `podium serve` and `podium worker` processes configured only by the standard OTEL_*
variables export their spans over OTLP/HTTP to a collector (a loopback sink decoding the
protobuf), continuing the caller's trace context across the Redis queue; settings Podium
would not follow are one line at start, not a traceback."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore, connect
from serve_process import start_serve

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
KEY = "pk_otlp_test"


class Collector:
    """What an OTLP/HTTP collector received: (span, its resource's attributes)."""

    def __init__(self, url: str, received: list[ExportTraceServiceRequest]) -> None:
        self.url = url
        self._received = received

    def spans(self) -> list[tuple[Any, dict[str, str]]]:
        return [
            (span, {a.key: a.value.string_value for a in rs.resource.attributes})
            for request in self._received
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
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
        yield Collector(f"http://127.0.0.1:{port}", received)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_worker_exports_its_runs_spans_to_an_otlp_collector(
    redis_url: str, prefix: str, collector: Collector
) -> None:
    client = connect(redis_url)
    store, queue = RedisRunStore(client, prefix=prefix), RedisQueue(client, prefix=prefix)
    await store.create(RunRecord("run_otlp_1", "support", "A-1?",
                                 metadata={"traceparent": f"00-{TRACE}-{PARENT}-01"}))
    await queue.submit(QueueItem("run_otlp_1", "support"))
    await queue.aclose()
    await store.aclose()
    await client.aclose()
    env = subprocess_env(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
                         OTEL_SERVICE_NAME="podium-test-worker")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--burst", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:support", "--log-level", "WARNING",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    spans = collector.spans()
    names = {span.name for span, _ in spans}
    assert {"invoke_agent support", "step 0", "step 1", "chat scripted",
            "execute_tool lookup"} <= names, names
    assert {span.trace_id.hex() for span, _ in spans} == {TRACE}
    run = next(span for span, _ in spans if span.name == "invoke_agent support")
    assert run.parent_span_id.hex() == PARENT
    assert {r["service.name"] for _, r in spans} == {"podium-test-worker"}


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_chat_completion_is_one_trace_from_the_gateway_through_redis_to_the_worker(
    redis_url: str, prefix: str, collector: Collector, tmp_path: Path
) -> None:
    """The OpenAI-compatible endpoint continues the caller's trace as POST /v1/runs does;
    each process names its service (OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME), and
    neither counts importing the SDK at start-up as a stall of its loop."""
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_TRACES_SAMPLER": "parentbased_always_off"}  # only what the caller samples
    gateway = start_serve(
        ["--redis", redis_url, "--prefix", prefix, "--agent", "observe_agents:support",
         "--port", "0", "--log-level", "info"],
        cwd=tmp_path,
        env=subprocess_env(PODIUM_KEYS=f"{KEY}=acme", **otel,
                           OTEL_RESOURCE_ATTRIBUTES="service.name=edge,deployment.environment=t"),
    )
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:support", "--log-level", "WARNING",
        env=subprocess_env(OTEL_SERVICE_NAME="podium-test-worker", **otel),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            resp = await http.post(
                "/v1/chat/completions",
                json={"model": "support", "messages": [{"role": "user", "content": "A-1?"}]},
                headers={"Authorization": f"Bearer {KEY}",
                         "traceparent": f"00-{TRACE}-{PARENT}-01"},
            )
        assert resp.status_code == 200, resp.text
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_log = await asyncio.wait_for(worker.communicate(), 60)
        gateway.stop()  # both flush their spans as they exit
    assert worker.returncode == 0, worker_log.decode()
    for log in (gateway.log, worker_log.decode()):
        assert "tracer_from_env" not in log, log
    spans = collector.spans()
    assert {span.trace_id.hex() for span, _ in spans} == {TRACE}
    by_name = {span.name: (span, resource) for span, resource in spans}
    submit, edge = by_name["POST /v1/chat/completions"]
    assert submit.parent_span_id.hex() == PARENT
    assert edge["service.name"] == "edge" and edge["deployment.environment"] == "t"
    run, worker_resource = by_name["invoke_agent support"]
    assert run.parent_span_id == submit.span_id
    assert worker_resource["service.name"] == "podium-test-worker"
    assert {"step 0", "chat scripted", "execute_tool lookup"} <= set(by_name)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "http/json"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_SAMPLER": "ratio"}, "OTEL_TRACES_SAMPLER='ratio'"),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
          "OTEL_TRACES_SAMPLER_ARG": "10%"}, "OTEL_TRACES_SAMPLER_ARG='10%'"),
        ({"PODIUM_TRACES_PER_SECOND": "many"}, "PODIUM_TRACES_PER_SECOND"),
    ],
    ids=["grpc", "http-json", "exporter", "sampler", "sampler-arg", "rate"],
)
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_setting_podium_would_not_follow_is_one_line_at_start(
    setting: dict[str, str], named: str, command: str, tmp_path: Path, redis_url: str,
    prefix: str,
) -> None:
    args = (["serve", "--store", "memory", "--port", "0"] if command == "serve"
            else ["worker", "--procs", "2", "--burst", "--redis", redis_url, "--prefix", prefix])
    done = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", *args, "--agent", "observe_agents:support"],
        env=subprocess_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", **setting),
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"podium {command}: error: " in done.stderr and named in done.stderr, done.stderr


def _provider(env: dict[str, str]) -> str:
    """What the SDK Podium installs from ``env`` exports to, and its service name."""
    code = (
        "from podium.observe.tracing import tracer_from_env\n"
        "from opentelemetry import trace\n"
        "tracer = tracer_from_env()\n"
        "provider = trace.get_tracer_provider()\n"
        "if tracer is None: print('off')\n"
        "else:\n"
        "  names = [type(p.span_exporter).__name__ for p in "
        "provider._active_span_processor._span_processors]\n"
        "  print(','.join(names), provider.resource.attributes['service.name'])\n"
    )
    clean = {k: v for k, v in subprocess_env().items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_exporter_and_the_resource_follow_the_standard_variables() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert _provider(endpoint) == "OTLPSpanExporter podium"
    assert _provider({"OTEL_TRACES_EXPORTER": "console"}) == "ConsoleSpanExporter podium"
    assert _provider({**endpoint, "OTEL_TRACES_EXPORTER": "otlp,console",
                      "OTEL_SERVICE_NAME": "w"}) == "OTLPSpanExporter,ConsoleSpanExporter w"
    assert _provider({**endpoint, "OTEL_TRACES_EXPORTER": "none"}) == "off"  # endpoint for logs
    assert _provider({**endpoint, "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes"}
                     ) == "OTLPSpanExporter from-attributes"
