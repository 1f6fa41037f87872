"""Runs as OpenTelemetry spans (GenAI semantic conventions), checked with the SDK's
in-memory exporter."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from observe_agents import support
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from podium import Agent, FunctionModel, Tool, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.errors import ConfigError
from podium.observe.sampling import RateLimitedSampler
from podium.observe.tracing import (
    RunTracer,
    default_sampler,
    trace_headers,
    tracing_configured,
)

pytestmark = pytest.mark.anyio


class _OtherTracer(trace.Tracer):
    """A tracer that is not the SDK's (as another OpenTelemetry implementation would be):
    the RunTracer then goes through the plain API."""

    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self.inner.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


class _OtherProvider(trace.TracerProvider):
    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _OtherTracer(self.inner.get_tracer(*args, **kwargs))


def _tracer(
    api: str = "sdk", sampler: Sampler | None = None
) -> tuple[RunTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RunTracer(provider if api == "sdk" else _OtherProvider(provider)), exporter


@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_a_run_is_an_invoke_agent_span_with_steps_chats_and_tools(api: str) -> None:
    tracer, exporter = _tracer(api)
    async with Engine() as engine:
        engine.hook = tracer
        record = await engine.run(support(), "where is A-1?")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent support", "step 0", "step 1", "chat scripted",
                          "execute_tool lookup"}
    run = spans["invoke_agent support"]
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "support"
    assert run.attributes["podium.run.id"] == record.run_id
    assert run.attributes["podium.run.status"] == "completed"
    assert run.parent is None
    traces = {s.context.trace_id for s in exporter.get_finished_spans()}
    assert traces == {run.context.trace_id}
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat scripted"]
    assert len(chats) == 2 and all(c.kind == SpanKind.CLIENT for c in chats)
    finished = exporter.get_finished_spans()
    steps = {s.context.span_id: s for s in finished if s.name.startswith("step")}
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id in steps
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        step = steps[chat.parent.span_id]
        assert step.parent is not None and step.parent.span_id == run.context.span_id
        assert step.start_time <= chat.start_time <= chat.end_time <= step.end_time
    tool_span = spans["execute_tool lookup"]
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.name"] == "lookup"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_0"
    assert tool_span.attributes["podium.tool.outcome"] == "ok"
    assert tool_span.attributes["podium.tool.attempts"] == 1
    assert spans["step 0"].attributes is not None
    phases = dict(p.split("=") for p in str(spans["step 0"].attributes["podium.phases"]).split())
    assert list(phases) == ["assemble", "model", "parse", "tools", "merge", "checkpoint"]
    wall, cpu = map(float, phases["tools"].split("/"))
    assert wall >= cpu >= 0
    for span in exporter.get_finished_spans():  # message content is off: nothing of it
        assert "where is A-1" not in str(span.attributes)
        assert "shipped" not in str(span.attributes)


@tool(timeout=0.05)
async def broken(order: str) -> str:
    """Fail.

    Args:
        order: The order id.
    """
    raise RuntimeError("backend down")


@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_a_failed_tool_call_and_a_failed_run_are_errors(api: str) -> None:
    tracer, exporter = _tracer(api)
    model = FunctionModel(lambda messages, request: tool_call_reply(("broken", '{"order": "A"}')))
    agent = Agent("flaky", model, tools=[broken], max_steps=1)
    async with Engine() as engine:
        engine.hook = tracer
        record = await engine.run(agent, "go")
    assert record.status == "failed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span = spans["execute_tool broken"]
    assert tool_span.status.status_code == StatusCode.ERROR
    assert tool_span.attributes is not None
    assert tool_span.attributes["podium.tool.outcome"] == "exception"
    run = spans["invoke_agent flaky"]
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None and run.attributes["error.type"] == "max_steps"


async def test_a_run_continues_the_trace_in_its_metadata() -> None:
    tracer, exporter = _tracer()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with Engine() as engine:
        engine.hook = tracer
        await engine.run(support(), "go", metadata={"traceparent": parent})
    run = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert f"{run.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert run.parent is not None and f"{run.parent.span_id:016x}" == "b7ad6b7169203331"


seen_headers: list[dict[str, str]] = []


@tool
async def headers_seen(order: str) -> str:
    """Note the trace headers an HTTP call made now would send.

    Args:
        order: The order id.
    """
    seen_headers.append(trace_headers({}))
    return "noted"


@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_sampling_is_decided_once_per_run_and_follows_the_callers_decision(
    api: str,
) -> None:
    # Podium's default shape (parent-based ratio), with a ratio of 0: only runs whose caller
    # sampled their trace are traced; the others pass their (unsampled) decision on.
    tracer, exporter = _tracer(api, ParentBased(TraceIdRatioBased(0.0)))
    model = FunctionModel(lambda messages, request: "done" if request.step else
                          tool_call_reply(("headers_seen", '{"order": "A"}')), name="m")
    agent = Agent("sampled", model, tools=[headers_seen])
    trace_id, caller = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    seen_headers.clear()
    async with Engine() as engine:
        engine.hook = tracer
        await engine.run(agent, "go")
        assert exporter.get_finished_spans() == ()
        await engine.run(agent, "go", metadata={"traceparent": f"00-{trace_id}-{caller}-00"})
        assert exporter.get_finished_spans() == ()
        await engine.run(agent, "go", metadata={"traceparent": f"00-{trace_id}-{caller}-01"})
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat m", "chat m", "execute_tool headers_seen",
                     "invoke_agent sampled", "step 0", "step 1"]
    assert tracer._runs == {}  # nothing kept once the runs ended
    unsampled_root, unsampled_child, sampled = (h.get("traceparent", "") for h in seen_headers)
    assert not unsampled_root or not int(unsampled_root[-2:], 16) & 1  # nothing, or "don't"
    assert not int(unsampled_child[-2:], 16) & 1
    assert unsampled_child.startswith(f"00-{trace_id}-")
    # A tool's requests name its own execute_tool span.
    call = next(s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool"))
    assert sampled == f"00-{trace_id}-{call.context.span_id:016x}-{call.context.trace_flags:02x}"
    assert int(sampled[-2:], 16) & 1


@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_the_default_sampler_traces_a_burst_then_a_few_runs_a_second(api: str) -> None:
    sampler = default_sampler({"PODIUM_TRACES_PER_SECOND": "0.001"})  # ~no refill in the test
    assert isinstance(sampler, RateLimitedSampler) and sampler.burst == 10
    tracer, exporter = _tracer(api, sampler)
    async with Engine() as engine:
        engine.hook = tracer
        for _ in range(15):
            await engine.run(support(), "go")
        caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        await engine.run(support(), "go", metadata={"traceparent": caller})  # always traced
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(runs) == 10 + 1
    assert sum(1 for r in runs if r.parent is not None) == 1


def test_the_default_sampler_is_configurable_and_yields_to_otel_traces_sampler() -> None:
    assert isinstance(default_sampler({}), RateLimitedSampler)
    assert default_sampler({}).per_second == 1.0
    assert default_sampler({"OTEL_TRACES_SAMPLER": "always_on"}) is None  # the SDK reads it
    for bad in ("fast", "-1"):
        with pytest.raises(ConfigError, match="PODIUM_TRACES_PER_SECOND"):
            default_sampler({"PODIUM_TRACES_PER_SECOND": bad})


def test_the_standard_samplers_decision_is_computed_as_the_sampler_makes_it() -> None:
    import random

    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision

    from podium.observe.spans import _parent_based_root_bound

    assert _parent_based_root_bound(ParentBased(ALWAYS_ON)) == 1 << 64
    assert _parent_based_root_bound(ALWAYS_ON) is None  # not parent-based: it is called
    assert _parent_based_root_bound(ParentBased(TraceIdRatioBased(0.5), ALWAYS_ON)) == (
        1 << 63)  # the same description as the standard one: its non-root parts are standard
    for ratio in (0.0, 0.01, 0.3):
        sampler = ParentBased(TraceIdRatioBased(ratio))
        bound = _parent_based_root_bound(sampler)
        assert bound is not None
        for trace_id in (random.getrandbits(128) for _ in range(2000)):
            decision = sampler.should_sample(None, trace_id, "run").decision
            assert (decision == Decision.RECORD_AND_SAMPLE) == (trace_id & ((1 << 64) - 1) < bound)


def test_tracing_is_off_and_never_imported_unless_configured() -> None:
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not tracing_configured({"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing_configured({"OTEL_SDK_DISABLED": "true", "PODIUM_TRACING": "1"})
    # redis-py 6+ imports opentelemetry itself when it is installed: loaded first, what it
    # brings is not ours; what the podium imports after it add must hold no opentelemetry.
    code = ("import sys, asyncio\n"
            "import redis.asyncio\n"
            "before = set(sys.modules)\n"
            "from podium import Agent, Engine\n"
            "from podium.observe.tracing import tracer_from_env\n"
            "assert tracer_from_env() is None\n"
            "import podium.worker.process, podium.gateway.service\n"
            "ours = [m for m in set(sys.modules) - before if m.startswith('opentelemetry')]\n"
            "assert not ours, ours\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_one_trace_crosses_the_gateway_the_redis_queue_and_the_worker(
    redis_url: str, prefix: str
) -> None:
    import httpx

    from podium.config import load_config
    from podium.gateway.app import create_app
    from podium.gateway.auth import KeyRing
    from podium.gateway.service import Gateway, ServedAgent
    from podium.queue.redis import RedisQueue
    from podium.store.redis import RedisRunStore
    from podium.worker.worker import Worker

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client_trace, client_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    config = load_config(None, {"PODIUM_KEYS": "pk_trace_test=tenant-a"})
    gw = Gateway(config, [ServedAgent(support())], RedisRunStore(redis_url, prefix=prefix),
                 RedisQueue(redis_url, prefix=prefix), KeyRing(config.keys))
    await gw.start()
    gw.tracer = RunTracer(provider)  # as OTEL_* would configure it
    try:
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test") as http:
            resp = await http.post(
                "/v1/runs", json={"agent": "support", "input": "where is A-1?"},
                headers={"Authorization": "Bearer pk_trace_test",
                         "traceparent": f"00-{client_trace}-{client_span}-01"},
            )
        assert resp.status_code == 202, resp.text
    finally:
        await gw.stop()
    # The worker shares nothing with the gateway but Redis (its own connections and tracer).
    store, queue = RedisRunStore(redis_url, prefix=prefix), RedisQueue(redis_url, prefix=prefix)
    async with store, queue, Engine(store) as engine:
        engine.hook = RunTracer(provider)
        worker = Worker(queue, engine, {"support": support()}, consumer="traced-worker")
        await worker.run(burst=True)
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {client_trace}
    by_name = {s.name: s for s in spans}
    submit = by_name["POST /v1/runs"]
    assert submit.kind == SpanKind.SERVER
    assert submit.parent is not None and f"{submit.parent.span_id:016x}" == client_span
    run = by_name["invoke_agent support"]
    assert run.parent is not None and run.parent.span_id == submit.context.span_id
    assert run.attributes is not None and run.attributes["podium.run.status"] == "completed"
    assert {"step 0", "step 1", "chat scripted", "execute_tool lookup"} <= set(by_name)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_model_calls_carry_the_runs_traceparent() -> None:
    from pathlib import Path

    from aiohttp import web

    from podium.models.openai import OpenAIChatModel

    body = (Path(__file__).parent.parent / "fixtures/backends/llamacpp_chat.json").read_bytes()
    seen: list[str | None] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tracer, exporter = _tracer()
    try:
        model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "qwen")
        async with model:
            agent = Agent("remote", model)
            async with Engine() as engine:
                await engine.run(agent, "capital of France?")  # tracing off: no header
                engine.hook = tracer
                await engine.run(agent, "capital of France?")
    finally:
        await runner.cleanup()
    run = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent remote")
    # The header names the call's own span (the server's span nests under it), the chat
    # span under its step under the run, all ending inside their parents.
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat "))
    step = next(s for s in exporter.get_finished_spans() if s.name == "step 0")
    c = chat.context
    assert seen == [None, f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"]
    assert chat.parent is not None and chat.parent.span_id == step.context.span_id
    assert step.parent is not None and step.parent.span_id == run.context.span_id
    for child, parent in ((chat, step), (step, run)):
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time
    # An OpenAI-compatible endpoint is the "openai" provider (the wire format it speaks),
    # and the model asked for is the id sent in the request, not Podium's name for it.
    assert chat.name == "chat qwen" and model.name != "qwen"
    for span in (run, chat):
        assert span.attributes is not None
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == "qwen"


@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_run_and_chat_spans_name_the_genai_provider(api: str) -> None:
    tracer, exporter = _tracer(api)
    async with Engine() as engine:
        engine.hook = tracer
        await engine.run(support(), "where is A-1?")
    finished = exporter.get_finished_spans()
    run = next(s for s in finished if s.name == "invoke_agent support")
    chats = [s for s in finished if s.name == "chat scripted"]
    assert len(chats) == 2
    for span in (run, *chats):
        assert span.attributes is not None
        # A model answering inside Podium (function-backed, simulated) is "podium".
        assert span.attributes["gen_ai.provider.name"] == "podium"
        assert span.attributes["gen_ai.request.model"] == "scripted"
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "support"


def test_the_provider_of_endpoints_pools_and_configured_models() -> None:
    from podium.config import Config, ModelConfig
    from podium.factory import build_models
    from podium.models.openai import OpenAIChatModel
    from podium.models.pool import Backend, BackendPool
    from podium.models.simulated import SimulatedModel

    vllm = OpenAIChatModel("http://127.0.0.1:8000/v1", "qwen")
    groq = OpenAIChatModel("http://127.0.0.1:8001/v1", "llama", provider="groq")
    assert (vllm.provider, groq.provider, SimulatedModel().provider) == ("openai", "groq", "podium")
    same = BackendPool([Backend(vllm, name="a"), Backend(OpenAIChatModel(
        "http://127.0.0.1:8002/v1", "qwen"), name="b")])
    assert same.provider == "openai"
    mixed = BackendPool([Backend(vllm, name="a"), Backend(groq, name="b")])
    assert mixed.provider == "podium.pool"
    # the model asked for: the backends' common id, else the pool's own name
    assert (same.traced_model, mixed.traced_model) == ("qwen", mixed.name)
    assert SimulatedModel().traced_model == SimulatedModel().name
    config = Config(models=[ModelConfig(name="ds", model="deepseek-chat", provider="deepseek",
                                        base_url="http://127.0.0.1:8003/v1")])
    assert build_models(config, {})["ds"].provider == "deepseek"
    plain = Config(models=[ModelConfig(name="q", model="qwen", base_url="http://127.0.0.1:8004/v1")])
    assert build_models(plain, {})["q"].provider == "openai"


async def test_a_child_runs_span_nests_under_its_parents_execute_tool_span() -> None:
    from podium.examples import research_team

    tracer, exporter = _tracer()
    async with Engine() as engine:
        engine.hook = tracer
        record = await engine.run(research_team.build_agent(), "durability and security")
    assert record.status == "completed"
    finished = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (lead,) = [s for s in finished if s.name == "invoke_agent research-team"]
    children = [s for s in finished if s.name == "invoke_agent researcher"]
    assert len(children) == 2
    for child in children:
        assert child.parent is not None
        call = by_id[child.parent.span_id]
        assert call.name == "execute_tool researcher"
        assert call.attributes is not None and call.attributes["podium.tool.outcome"] == "ok"
        assert call.start_time <= child.start_time <= child.end_time <= call.end_time
        assert call.parent is not None
        step = by_id[call.parent.span_id]
        assert step.name == "step 0" and step.parent is not None
        assert step.parent.span_id == lead.context.span_id
    assert len({s.context.trace_id for s in finished}) == 1
    assert len([s for s in finished if s.name == "execute_tool researcher"]) == 2


@contextlib.asynccontextmanager
async def _order_server() -> AsyncIterator[tuple[Tool, list[str | None]]]:
    """An HTTP order service on loopback and an ``http_tool`` calling it; the list gets
    each request's ``traceparent`` header (None: none sent)."""
    from aiohttp import web

    from podium.security.egress import EgressPolicy
    from podium.tools.http import http_tool

    seen: list[str | None] = []

    async def order(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"status": "shipped"})

    app = web.Application()
    app.router.add_get("/orders/{id}", order)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield http_tool("lookup_order", f"http://127.0.0.1:{port}/orders/{{id}}",
                        params={"id": "The order id."},
                        policy=EgressPolicy(allow_private=True, allow_ports=None)), seen
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_http_tools_carry_the_runs_traceparent() -> None:
    model = FunctionModel(lambda messages, request: "done" if request.step else
                          tool_call_reply(("lookup_order", '{"id": "A-1"}')), name="m")
    tracer, exporter = _tracer()
    async with _order_server() as (lookup_order, seen), Engine() as engine:
        agent = Agent("http-user", model, tools=[lookup_order])
        await engine.run(agent, "where is A-1?")  # tracing off: no header
        engine.hook = tracer
        await engine.run(agent, "where is A-1?")
    run = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent http-user")
    step = next(s for s in exporter.get_finished_spans() if s.name == "step 0")
    call = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup_order")
    assert step.parent is not None and step.parent.span_id == run.context.span_id
    assert call.parent is not None and call.parent.span_id == step.context.span_id
    assert call.attributes is not None and call.attributes["gen_ai.tool.type"] == "function"
    c = call.context  # the tool's request nests under the call that made it
    assert seen == [None, f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"]


def test_the_rate_limit_counts_tokens_on_its_clock() -> None:
    now = [100.0]
    sampler = RateLimitedSampler(per_second=2.0, burst=2.0, clock=lambda: now[0])
    assert [sampler.take() for _ in range(3)] == [True, True, False]  # the burst, then none
    now[0] += 0.25  # half a token
    assert not sampler.take()
    now[0] += 0.25  # one token due
    assert [sampler.take(), sampler.take()] == [True, False]
    now[0] += 10.0  # refills up to the burst only
    assert [sampler.take() for _ in range(3)] == [True, True, False]
    never = RateLimitedSampler(per_second=0.0, burst=1.0, clock=lambda: now[0])
    assert never.take()
    now[0] += 1e6
    assert not never.take()


async def test_an_untraced_run_asks_for_nothing_at_its_steps() -> None:
    # The engine calls a hook at each step only when its run_started asked for it: a tracer
    # whose run is not sampled answers None (nothing per step), a sampled one its step.
    unsampled, _ = _tracer("sdk", ParentBased(TraceIdRatioBased(0.0)))
    sampled, _ = _tracer("sdk", ParentBased(TraceIdRatioBased(1.0)))
    record = RunRecord("run_hook", "support", "go")
    assert unsampled.run_started(support(), record) is None
    assert sampled.run_started(support(), record) is not None
    unsampled.run_finished(record)
    sampled.run_finished(record)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
@pytest.mark.parametrize("api", ["sdk", "other"])
async def test_several_calls_requests_name_their_steps_tools_span(api: str) -> None:
    """Two HTTP calls at once: which one sent a request is not known, so both name the
    step's ``tools`` span, the parent of their ``execute_tool`` spans; every span ends
    inside its parent."""
    model = FunctionModel(lambda messages, request: "done" if request.step else tool_call_reply(
        ("lookup_order", '{"id": "A-1"}'), ("lookup_order", '{"id": "A-2"}')), name="m")
    tracer, exporter = _tracer(api)
    async with _order_server() as (lookup_order, seen), Engine() as engine:
        engine.hook = tracer
        await engine.run(Agent("http-user", model, tools=[lookup_order]), "where?")
    spans = exporter.get_finished_spans()
    (tools,) = [s for s in spans if s.name == "tools"]
    calls = [s for s in spans if s.name == "execute_tool lookup_order"]
    assert len(calls) == 2
    assert all(c.parent is not None and c.parent.span_id == tools.context.span_id for c in calls)
    t = tools.context
    assert seen == [f"00-{t.trace_id:032x}-{t.span_id:016x}-{t.trace_flags:02x}"] * 2
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        if parent is not None:
            assert parent.start_time <= span.start_time, (span.name, parent.name)
            assert span.end_time <= parent.end_time, (span.name, parent.name)
