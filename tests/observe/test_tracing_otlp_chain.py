"""One trace across real processes, received by an OTLP/HTTP collector on loopback: a
`podium serve` gateway submits a ``wait: true`` run through Redis to a `podium worker`,
whose agent calls `podium sim-server` (through a recording proxy, to see the headers each
model call sends). The spans chain caller → gateway → run → step → chat/tool, each model
call's ``traceparent`` names its own ``chat`` span, and the gateway's span covers the run."""

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

from serve_process import sim_server, start_serve

from .conftest import subprocess_env
from .test_tracing_otlp import KEY, PARENT, TRACE, Collector, collector

__all__ = ("collector",)  # (the fixture, imported to be found)

pytestmark = pytest.mark.anyio


class Proxy:
    """Forwards ``/v1/...`` to the sim-server, recording each chat call's ``traceparent``."""

    def __init__(self, url: str, upstream: str) -> None:
        self.url = url
        self.upstream = upstream
        self.traceparents: list[str | None] = []


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    with sim_server("--step-ms", "1", "--output-tokens", "4", "--tool-steps", "1") as base:
        client = httpx.AsyncClient(timeout=60)
        state = Proxy("", base)

        async def forward(request: web.Request) -> web.StreamResponse:
            if request.method == "POST" and request.path.endswith("/chat/completions"):
                state.traceparents.append(request.headers.get("traceparent"))
            tail = request.path.removeprefix("/v1")
            upstream = client.build_request(
                request.method, base + tail, content=await request.read(),
                headers={"content-type": request.headers.get("content-type", "")},
            )
            reply = await client.send(upstream, stream=True)
            response = web.StreamResponse(status=reply.status_code)
            response.content_type = reply.headers.get("content-type", "application/json")
            await response.prepare(request)
            async for chunk in reply.aiter_raw():
                await response.write(chunk)
            await reply.aclose()
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        state.url = f"http://127.0.0.1:{port}/v1"
        try:
            yield state
        finally:
            await runner.cleanup()
            await client.aclose()


def _w3c(span: Any) -> str:
    return f"00-{span.trace_id.hex()}-{span.span_id.hex()}-01"


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_model_calls_name_their_chat_spans_across_gateway_redis_worker_and_model(
    redis_url: str, prefix: str, collector: Collector, proxy: Proxy, tmp_path: Path
) -> None:
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OBSERVE_MODEL_URL": proxy.url}  # (Podium's default sampler: attributes kept)
    gateway = start_serve(
        ["--redis", redis_url, "--prefix", prefix, "--agent", "observe_agents:remote",
         "--port", "0", "--log-level", "info"],
        cwd=tmp_path, env=subprocess_env(PODIUM_KEYS=f"{KEY}=acme", OTEL_SERVICE_NAME="gw",
                                         **otel),
    )
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:remote", "--log-level", "WARNING",
        env=subprocess_env(OTEL_SERVICE_NAME="wk", **otel),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            resp = await http.post(
                "/v1/runs", json={"agent": "remote", "input": "A-1?", "wait": True},
                headers={"Authorization": f"Bearer {KEY}",
                         "traceparent": f"00-{TRACE}-{PARENT}-01"},
            )
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "completed", resp.text
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_log = await asyncio.wait_for(worker.communicate(), 60)
        gateway.stop()  # both flush their spans as they exit
    assert worker.returncode == 0, worker_log.decode()
    spans = [span for span, _ in collector.spans()]
    assert {span.trace_id.hex() for span in spans} == {TRACE}
    by_id = {span.span_id: span for span in spans}
    (server,) = [s for s in spans if s.name == "POST /v1/runs"]
    (run,) = [s for s in spans if s.name == "invoke_agent remote"]
    chats = [s for s in spans if s.name == "chat podium-sim"]
    (tool,) = [s for s in spans if s.name == "execute_tool lookup"]
    steps = {s.span_id: s for s in spans if s.name.startswith("step ")}
    assert len(chats) == 2 and len(steps) == 2, [s.name for s in spans]
    # The chain: the caller's span → the gateway's server span → the run → its steps →
    # each step's chat and tool spans.
    assert server.parent_span_id.hex() == PARENT
    assert run.parent_span_id == server.span_id
    assert all(step.parent_span_id == run.span_id for step in steps.values())
    assert all(s.parent_span_id in steps for s in (*chats, tool))
    # Each model call's request named its own chat span, not the run's or the step's.
    assert sorted(p or "" for p in proxy.traceparents) == sorted(_w3c(c) for c in chats)
    # Every child starts and ends inside its parent (the gateway's span covers the wait).
    # One edge crosses processes: the worker's run span ends once its last step is heard
    # of, after the final write the gateway answers on, so a worker starved of CPU right
    # after that write (seen with two hogs on 2 cores: 4.7 ms) ends it after the gateway's
    # span. No clock taken after the write can be ordered with the other process; that edge
    # is allowed 100 ms (a server span that ended at submission misses it by the run's
    # whole wait), every edge within one process none.
    for span in spans:
        parent = by_id.get(span.parent_span_id)
        if parent is not None:
            slack = 100 * 10**6 if span is run else 0
            assert parent.start_time_unix_nano <= span.start_time_unix_nano, span.name
            assert span.end_time_unix_nano <= parent.end_time_unix_nano + slack, span.name
    # And without slack: the last model call ended before the final write the gateway
    # answers on, so the gateway's span, covering the wait, ends after every chat span.
    assert server.end_time_unix_nano >= max(c.end_time_unix_nano for c in chats)
    # Attributes are kept under the default sampler.
    attributes = {a.key: a.value.string_value for a in server.attributes}
    assert attributes["http.route"] == "/v1/runs"
    assert attributes["gen_ai.agent.name"] == "remote"
