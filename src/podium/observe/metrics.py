"""Prometheus metrics of a process that drives runs (a worker, or the gateway's engine).

The engine hands every checkpointed step to :meth:`RunMetrics.step`, which only
appends it to a list: nothing per step but one append. A task on the loop folds
the list into the Prometheus histograms and counters every ``interval_s``
(adding bucket counts in bulk, not one ``observe`` per value), and samples the
statistics the components keep anyway (worker, queue, loop lag, blocking
detector, ``getrusage``). A scrape therefore sees values at most one interval old.

Under ``podium worker --procs N`` each child writes its values to
prometheus-client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``) and the
supervisor serves their sum on one port.

Labels stay bounded: agents and models are what the process serves, tool names
are capped (the rest count as ``other``); no run ids anywhere.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import resource
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from podium.engine.profile import STEP_PHASES
from podium.lifecycle import stop_task

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.messages import Usage
    from podium.observe.blocking import BlockingDetector
    from podium.observe.looplag import LoopLagMonitor
    from podium.queue.base import RunQueue
    from podium.tools.executor import ToolResult
    from podium.worker.worker import Worker

__all__ = ("PHASE_BUCKETS", "RunMetrics")

#: Seconds; from a 50 µs CPU slice to a minute-long tool call.
PHASE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_MAX_TOOLS = 64
_MAX_NAMES = 32


class _Folder:
    """Bulk-adds values to one labelled histogram child: bucket deltas, then one ``inc`` each.

    Uses the child's per-bucket values (non-cumulative in prometheus-client), which is
    what ``observe`` itself increments; tests scrape and parse the result."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def flush_into(self, child: Any) -> None:
        for i, n in enumerate(self.counts):
            if n:
                child._buckets[i].inc(n)
                self.counts[i] = 0
        child._sum.inc(self.total)
        self.total = 0.0


class RunMetrics:
    """The metrics; also the engine's hook (``engine.hook = metrics``). Example::

        metrics = RunMetrics()
        engine.hook = metrics
        metrics.start(worker=worker, queue=queue)   # inside the running loop
    """

    def __init__(
        self, registry: CollectorRegistry = REGISTRY, *, interval_s: float = 1.0
    ) -> None:
        self.interval_s = interval_s
        self._pending: list[tuple[str, str, StepProfile, int, int, tuple[ToolResult, ...]]] = []
        self._finished: list[tuple[str, str, str]] = []
        self._usage: dict[str, Usage] = {}
        self._task: asyncio.Task[None] | None = None
        self._sources: dict[str, Any] = {}
        self._last: dict[str, float] = {}
        self._tools: set[str] = set()
        self._names: set[str] = set()
        self._folders: dict[tuple[str, tuple[str, ...]], _Folder] = {}
        r = registry
        self.phase_wall = Histogram("podium_step_phase_seconds", "Wall time of each step phase.",
                                    ["agent", "phase"], buckets=PHASE_BUCKETS, registry=r)
        self.phase_cpu = Histogram("podium_step_phase_cpu_seconds",
                                   "CPU time of each step phase (the rest of its wall is waiting).",
                                   ["agent", "phase"], buckets=PHASE_BUCKETS, registry=r)
        self.model = Histogram("podium_model_call_seconds", "Model call latency (the model phase).",
                               ["model"], buckets=PHASE_BUCKETS, registry=r)
        self.ttft = Histogram("podium_model_ttft_seconds", "Time to first token (streamed calls).",
                              ["model"], buckets=PHASE_BUCKETS, registry=r)
        self.tool = Histogram("podium_tool_call_seconds", "Tool call latency, retries included.",
                              ["tool"], buckets=PHASE_BUCKETS, registry=r)
        self.tool_calls = Counter("podium_tool_calls", "Tool calls by outcome (ok, timeout, …).",
                                  ["tool", "outcome"], registry=r)
        self.tool_retries = Counter("podium_tool_retries", "Extra attempts of tool calls.",
                                    ["tool"], registry=r)
        self.steps = Counter("podium_steps", "Steps checkpointed.", ["agent"], registry=r)
        self.tokens = Counter("podium_model_tokens", "Tokens by direction.", ["agent", "kind"],
                              registry=r)
        self.runs = Counter("podium_runs_finished", "Runs that reached a terminal status.",
                            ["agent", "status", "reason"], registry=r)
        self.active = Gauge("podium_worker_active_runs", "Runs being driven now.",
                            registry=r, multiprocess_mode="livesum")
        self.capacity = Gauge("podium_worker_capacity", "Runs this process may drive at once.",
                              registry=r, multiprocess_mode="livesum")
        self.queue_waiting = Gauge("podium_queue_waiting", "Runs waiting in the queue.", ["pool"],
                                   registry=r, multiprocess_mode="max")
        self.queue_in_flight = Gauge("podium_queue_in_flight", "Runs claimed, not acknowledged.",
                                     ["pool"], registry=r, multiprocess_mode="max")
        self.reclaims = Counter("podium_lease_reclaims",
                                "Runs redelivered after their worker's lease expired "
                                "(session migrations).", ["pool"], registry=r)
        self.dead_letters = Counter("podium_dead_letters", "Runs dead-lettered.", ["pool"],
                                    registry=r)
        self.loop_lag = Gauge("podium_event_loop_lag_p99_seconds", "Event-loop lag p99 (window).",
                              registry=r, multiprocess_mode="max")
        self.blocked = Counter("podium_event_loop_blocked",
                               "Callbacks that held the event loop past the blocking threshold.",
                               registry=r)
        self.ctx_switches = Counter("podium_context_switches", "Context switches of the process.",
                                    ["kind"], registry=r)
        self.cpu = Counter("podium_process_cpu_seconds", "CPU time of the process (user+system).",
                           registry=r)
        self.cpu_util = Gauge("podium_process_cpu_utilization",
                              "CPU seconds per second over the last interval (1.0 = one core).",
                              registry=r, multiprocess_mode="livesum")
        self._rusage = resource.getrusage(resource.RUSAGE_SELF)
        self._rusage_at = time.monotonic()

    # -- the engine's hook (hot path: appends only) ------------------------------------------

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: Usage,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        prev = self._usage.get(record.run_id)
        self._usage[record.run_id] = usage
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
        if prev is not None:
            tokens_in -= prev.input_tokens
            tokens_out -= prev.output_tokens
        self._pending.append((agent.name, agent.model.name, profile, tokens_in, tokens_out,
                              tuple(r for _, r in results) if results else ()))
        if len(self._pending) >= 8192:  # nobody flushes (no loop task): keep memory bounded
            self.fold()

    def run_finished(self, record: RunRecord) -> None:
        self._usage.pop(record.run_id, None)
        self._finished.append((record.agent, record.status, record.reason or ""))

    # -- folding ----------------------------------------------------------------------------

    def _name(self, name: str) -> str:
        if name in self._names or len(self._names) < _MAX_NAMES:
            self._names.add(name)
            return name
        return "other"

    def _tool(self, name: str) -> str:
        if name in self._tools or len(self._tools) < _MAX_TOOLS:
            self._tools.add(name)
            return name
        return "other"

    def _folder(self, hist: Histogram, labels: tuple[str, ...]) -> _Folder:
        key = (hist._name, labels)
        folder = self._folders.get(key)
        if folder is None:
            folder = self._folders[key] = _Folder(PHASE_BUCKETS)
        return folder

    def fold(self) -> None:
        """Move what the hook collected into the Prometheus metrics."""
        pending, self._pending = self._pending, []
        finished, self._finished = self._finished, []
        touched: dict[tuple[int, tuple[str, ...]], tuple[Histogram, tuple[str, ...], _Folder]] = {}

        def add(hist: Histogram, labels: tuple[str, ...], value: float) -> None:
            key = (id(hist), labels)
            entry = touched.get(key)
            if entry is None:
                entry = touched[key] = (hist, labels, self._folder(hist, labels))
            entry[2].add(value)

        model_i = STEP_PHASES.index("model")
        steps: dict[str, int] = {}
        for agent, model, profile, tokens_in, tokens_out, results in pending:
            agent = self._name(agent)
            model = self._name(model)
            steps[agent] = steps.get(agent, 0) + 1
            for i, phase in enumerate(STEP_PHASES):
                wall = profile.wall_ns[i]
                add(self.phase_wall, (agent, phase), wall / 1e9)
                add(self.phase_cpu, (agent, phase), min(profile.cpu_ns[i], wall) / 1e9)
            add(self.model, (model,), profile.wall_ns[model_i] / 1e9)
            if profile.ttft_ns:
                add(self.ttft, (model,), profile.ttft_ns / 1e9)
            if tokens_in > 0:
                self.tokens.labels(agent, "input").inc(tokens_in)
            if tokens_out > 0:
                self.tokens.labels(agent, "output").inc(tokens_out)
            for result in results:
                tool = self._tool(result.name)
                add(self.tool, (tool,), result.wall_ns / 1e9)
                self.tool_calls.labels(tool, "ok" if result.ok else (result.error or "error")).inc()
                if result.attempts > 1:
                    self.tool_retries.labels(tool).inc(result.attempts - 1)
        for agent, n in steps.items():
            self.steps.labels(agent).inc(n)
        for hist, labels, folder in touched.values():
            folder.flush_into(hist.labels(*labels))
        for agent, status, reason in finished:
            self.runs.labels(self._name(agent), status, reason).inc()

    # -- sampling the components ------------------------------------------------------------

    def _delta(self, key: str, total: float) -> float:
        prev = self._last.get(key, 0.0)
        self._last[key] = total
        return max(0.0, total - prev)

    async def sample(self) -> None:
        """Read the components' statistics into gauges and counters."""
        worker: Worker | None = self._sources.get("worker")
        queue: RunQueue | None = self._sources.get("queue")
        lag: LoopLagMonitor | None = self._sources.get("lag")
        blocking: BlockingDetector | None = self._sources.get("blocking")
        pool: str = self._sources.get("pool", "default")
        if worker is not None:
            ws = worker.statistics()
            self.active.set(ws.active)
            self.capacity.set(ws.capacity)
        if queue is not None:
            with contextlib.suppress(Exception):  # a metric is never worth failing the worker
                await queue.depth(pool)
            qs = queue.statistics(pool)
            self.queue_waiting.labels(pool).set(qs.waiting)
            self.queue_in_flight.labels(pool).set(qs.in_flight)
            self.reclaims.labels(pool).inc(self._delta("reclaims", qs.redelivered))
            self.dead_letters.labels(pool).inc(self._delta("dead", qs.dead_lettered))
        if lag is not None:
            self.loop_lag.set(lag.p99_ms() / 1e3)
        if blocking is not None:
            self.blocked.inc(self._delta("blocked", blocking.statistics().blocks))
        now_ru, now = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        prev_ru, prev = self._rusage, self._rusage_at
        self._rusage, self._rusage_at = now_ru, now
        cpu = (now_ru.ru_utime + now_ru.ru_stime) - (prev_ru.ru_utime + prev_ru.ru_stime)
        self.cpu.inc(max(0.0, cpu))
        self.cpu_util.set(cpu / (now - prev) if now > prev else 0.0)
        self.ctx_switches.labels("voluntary").inc(max(0, now_ru.ru_nvcsw - prev_ru.ru_nvcsw))
        self.ctx_switches.labels("involuntary").inc(max(0, now_ru.ru_nivcsw - prev_ru.ru_nivcsw))

    async def flush(self) -> None:
        self.fold()
        await self.sample()

    # -- lifecycle --------------------------------------------------------------------------

    def start(
        self,
        *,
        worker: Worker | None = None,
        queue: RunQueue | None = None,
        pool: str = "default",
        lag: LoopLagMonitor | None = None,
        blocking: BlockingDetector | None = None,
        own_lag: bool = False,
    ) -> None:
        """Fold and sample every ``interval_s`` on the running loop (idempotent); with
        ``own_lag`` :meth:`stop` stops ``lag`` too."""
        self._sources = {"worker": worker, "queue": queue, "pool": pool, "lag": lag,
                         "blocking": blocking, "own_lag": own_lag}
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="podium-metrics")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.flush()

    async def stop(self) -> None:
        """Stop the task, after a last flush (so a short-lived worker's runs are counted)."""
        task, self._task = self._task, None
        await stop_task(task)
        await self.flush()
        lag = self._sources.get("lag")
        if lag is not None and self._sources.get("own_lag"):
            await lag.stop()

