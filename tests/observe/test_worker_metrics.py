"""Prometheus metrics of the processes that drive runs: scraped and parsed as Prometheus would."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from observe_agents import support
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.observe.metrics import RunMetrics
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore, connect

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

Parsed = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Parsed:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed: Parsed, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in parsed.items() if n == name and want <= ls)


async def test_steps_tools_and_runs_are_counted_in_process() -> None:
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    agent = support()
    async with Engine() as engine:
        engine.hook = metrics
        for _ in range(5):
            record = await engine.run(agent, "where is A-1?")
            assert record.status == "completed"
    await metrics.flush()
    parsed = samples(generate_latest(registry).decode())
    assert value(parsed, "podium_steps_total", agent="support") == 10
    # the tools phase: a sample of each step that called a tool (the answers called none)
    assert value(parsed, "podium_step_phase_seconds_count", agent="support", phase="tools") == 5
    assert value(parsed, "podium_step_phase_seconds_bucket", phase="tools", le="+Inf") == 5
    assert value(parsed, "podium_step_phase_seconds_count", agent="support", phase="model") == 10
    assert value(parsed, "podium_step_phase_cpu_seconds_total", phase="parse") > 0
    assert value(parsed, "podium_tool_calls_total", tool="lookup", outcome="ok") == 5
    assert value(parsed, "podium_tool_call_seconds_count", tool="lookup") == 5
    assert value(parsed, "podium_model_call_seconds_count", model="scripted") == 10
    assert value(parsed, "podium_runs_finished_total", agent="support", status="completed") == 5
    assert value(parsed, "podium_model_tokens_total", kind="input") > 0
    assert value(parsed, "podium_process_cpu_seconds_total") > 0
    assert value(parsed, "podium_context_switches_total", kind="voluntary") >= 0
    for name, _ in parsed:  # bounded cardinality: no run ids in any label
        assert "run_" not in name
    assert not any("run_" in v for (_, labels) in parsed for _, v in labels)


async def _submit(redis_url: str, prefix: str, n: int) -> list[str]:
    client = connect(redis_url)
    store = RedisRunStore(client, prefix=prefix)
    queue = RedisQueue(client, prefix=prefix)
    ids = [f"run_metrics_{i}" for i in range(n)]
    for run_id in ids:
        await store.create(RunRecord(run_id, "support", "where is A-1?"))
        await queue.submit(QueueItem(run_id, "support"))
    await queue.aclose()
    await store.aclose()
    await client.aclose()
    return ids


async def _start_worker(redis_url: str, prefix: str, *extra: str) -> tuple[Any, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:support", "--log-level", "WARNING",
        "--metrics-port", "0", "--concurrency", "8", *extra,
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert line, "worker exited before serving metrics"
        found = re.search(r"metrics on :(\d+)/metrics", line)
        if found:
            return proc, int(found[1])


async def _scrape_until(port: int, predicate: Any) -> Parsed:
    async with httpx.AsyncClient() as client:
        for _ in range(600):
            resp = await client.get(f"http://127.0.0.1:{port}/metrics")
            parsed = samples(resp.text)
            if predicate(parsed):
                return parsed
            await asyncio.sleep(0.1)
    raise AssertionError(f"metrics never matched: {resp.text[:3000]}")


async def _stop(proc: Any) -> None:
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), 60)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
@pytest.mark.parametrize("procs", [None, 2], ids=["one-process", "supervisor"])
async def test_a_worker_serves_metrics_that_move_while_runs_execute(
    redis_url: str, prefix: str, procs: int | None
) -> None:
    extra = ("--procs", str(procs)) if procs else ()
    proc, port = await _start_worker(redis_url, prefix, *extra)
    try:
        expected_capacity = 8 * (procs or 1)
        before = await _scrape_until(
            port, lambda p: value(p, "podium_worker_capacity") == expected_capacity
        )
        assert value(before, "podium_runs_finished_total") == 0
        await _submit(redis_url, prefix, 12)
        # A scrape through the supervisor reads its children's files one after another (in
        # the order the directory lists them), so a child that folds mid-scrape may show
        # its runs counter and not yet its histograms: wait until every figure is in.
        expected = {
            ("podium_runs_finished_total", ("status", "completed")): 12,
            ("podium_steps_total", ("agent", "support")): 24,
            ("podium_step_phase_seconds_count", ("phase", "checkpoint")): 24,
            ("podium_tool_calls_total", ("tool", "lookup"), ("outcome", "ok")): 12,
            ("podium_queue_wait_seconds_count", ("pool", "default")): 12,
        }

        def figures(p: Parsed) -> dict[tuple[Any, ...], float]:
            return {k: value(p, k[0], **dict(k[1:])) for k in expected}

        after = await _scrape_until(port, lambda p: figures(p) == expected)
        assert figures(after) == expected
        assert value(after, "podium_process_cpu_seconds_total") > 0
        assert ("podium_queue_waiting", frozenset({("pool", "default")})) in after
        assert ("podium_event_loop_blocked_total", frozenset()) in after
        assert ("podium_lease_reclaims_total", frozenset({("pool", "default")})) in after
    finally:
        await _stop(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
@pytest.mark.parametrize("procs", [None, 2], ids=["one-process", "supervisor"])
async def test_the_metrics_port_is_the_workers_from_its_first_line(
    redis_url: str, prefix: str, procs: int | None
) -> None:
    """Bound (and listening) before the worker says it serves, not checked then bound later:
    another process cannot take the port in between and fail the worker late."""
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:support", "--log-level", "WARNING",
        "--metrics-port", str(port), *(("--procs", str(procs)) if procs else ()),
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        first = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert first.startswith("podium worker: pool 'default' serves"), first
        with socket.socket() as rival:  # another server, as eager as ours to share a port
            rival.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="in use"):
                rival.bind(("0.0.0.0", port))
                rival.listen()
        while True:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, "worker exited before serving metrics"
            if "/metrics" in line:
                assert f"metrics on :{port}/metrics" in line, line
                break
        await _scrape_until(port, lambda p: value(p, "podium_worker_capacity") > 0)
    finally:
        await _stop(proc)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_the_gateway_exports_its_embedded_engines_steps() -> None:
    from podium.config import load_config
    from podium.gateway.app import create_app
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.store.memory import MemoryRunStore

    config = load_config(None, {"PODIUM_KEYS": "pk_metrics_test=tenant-a:admin"})
    gw = build_gateway(config, [ServedAgent(support())], store=MemoryRunStore())
    await gw.start()
    try:
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test",
                                     headers={"Authorization": "Bearer pk_metrics_test"}) as c:
            for _ in range(3):
                resp = await c.post("/v1/runs", json={"agent": "support", "input": "A-1?",
                                                      "wait": True})
                assert resp.json()["status"] == "completed", resp.text
            assert gw.run_metrics is not None
            await gw.run_metrics.flush()
            parsed = samples((await c.get("/metrics")).text)
    finally:
        await gw.stop()
    assert value(parsed, "podium_steps_total", agent="support") == 6
    assert value(parsed, "podium_tool_calls_total", tool="lookup", outcome="ok") == 3
    assert value(parsed, "podium_runs_finished_total", status="completed") == 3
    assert value(parsed, "podium_http_requests_total") >= 3  # the gateway's own metrics too


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_gateway_in_front_of_workers_counts_its_own_stalls_and_cpu(
    redis_url: str, prefix: str
) -> None:
    """With no engine of its own (workers drive the runs) the gateway still exports its
    loop's stalls, its CPU and its context switches, as every serving process does."""
    from podium.config import load_config
    from podium.gateway.app import create_app
    from podium.gateway.auth import KeyRing
    from podium.gateway.service import Gateway, ServedAgent
    from podium.observe.blocking import BlockingDetector

    config = load_config(None, {"PODIUM_KEYS": "pk_metrics_test=ops:admin"})
    gw = Gateway(config, [ServedAgent(support())], RedisRunStore(redis_url, prefix=prefix),
                 RedisQueue(redis_url, prefix=prefix), KeyRing(config.keys))
    stalled = asyncio.Event()
    gw.blocking = BlockingDetector(20, on_block=lambda event: stalled.set())
    await gw.start()
    try:
        time.sleep(0.1)  # noqa: ASYNC251 - a stall of the gateway's own loop
        await stalled.wait()
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test",
                                     headers={"Authorization": "Bearer pk_metrics_test"}) as c:
            parsed = samples((await c.get("/metrics")).text)
    finally:
        await gw.stop()
    assert gw.engine is None and gw.run_metrics is None
    assert value(parsed, "podium_event_loop_blocked_total") >= 1
    assert value(parsed, "podium_process_cpu_seconds_total") > 0
    assert ("podium_context_switches_total", frozenset({("kind", "voluntary")})) in parsed
    assert ("podium_context_switches_total", frozenset({("kind", "involuntary")})) in parsed


async def test_backend_occupancy_and_queue_wait_are_sampled() -> None:
    from podium import Agent, FunctionModel
    from podium.models.pool import Backend, BackendPool

    release = asyncio.Event()
    called = asyncio.Event()

    async def slow(messages: object, request: object) -> str:
        called.set()
        await release.wait()
        return "done"

    pool = BackendPool([Backend(FunctionModel(slow, name="cpu-a"), capacity=4, group="cpu")])
    agent = Agent("pooled", pool)
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    async with pool, Engine() as engine:
        engine.hook = metrics
        metrics.start(agents=[agent])
        record = await engine.create(agent, "go")
        task = asyncio.create_task(engine.execute(agent, record, admit_ns=2_000_000))
        await called.wait()
        await metrics.sample()
        busy = samples(generate_latest(registry).decode())
        release.set()
        assert (await task).status == "completed"
        await metrics.stop()
    done = samples(generate_latest(registry).decode())
    assert value(busy, "podium_backend_outstanding") == 1
    assert value(busy, "podium_backend_capacity") == 4
    assert value(done, "podium_backend_outstanding") == 0
    assert value(done, "podium_queue_wait_seconds_count", pool="default") == 1
    assert value(done, "podium_queue_wait_seconds_sum", pool="default") == pytest.approx(0.002)


def test_process_cpu_counts_from_the_process_start() -> None:
    """process_cpu_seconds_total, by convention, is the CPU since the process started (its
    imports and start-up too): the counter began at 0 when the metrics did (0.04 s reported
    while /proc said 2.3 s), which only rate() forgave."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF)
    registry = CollectorRegistry()
    RunMetrics(registry)
    parsed = samples(generate_latest(registry).decode())
    assert value(parsed, "podium_process_cpu_seconds_total") >= before.ru_utime + before.ru_stime


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_starting_a_worker_is_no_stall_of_its_loop(redis_url: str, prefix: str) -> None:
    """Importing prometheus-client takes tens of milliseconds, and so does the rest of a
    worker's start-up: the blocking detector starts once it is over, so no worker logs
    its own start-up as a stall (with a threshold of 2 ms: a busy host may starve the
    loop later too, but that stall shows no frame of the start-up's)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
        "--prefix", prefix, "--agent", "observe_agents:support", "--procs", "2",
        "--metrics-port", "0", env={**subprocess_env(), "PODIUM_BLOCKING_MS": "2"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    while sum("ready pool=" in line for line in lines) < 2:  # both children started
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert line, "".join(lines)
        lines.append(line)
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    text = "".join(lines) + err.decode()
    # Frames only the start-up runs: an import, the metrics server's and health's start.
    # (Not the periodic metrics flush, which also calls prometheus_client: on a starved
    # host a flush preempted mid-way is logged, rightly, and is no start-up stall.)
    start_up = ("_find_and_load", "prometheus_client/__init__.py", "start_metrics",
                "health.start()")
    stalls = [block for block in text.split("event loop blocked")[1:]
              if any(frame in block.split("worker[")[0] for frame in start_up)]
    assert not stalls, text
