"""Prometheus metrics of a process that drives runs (a worker, or the gateway's engine).

The engine hands every checkpointed step to :meth:`RunMetrics.step`, which only
files the step's profile (and tool results) under its agent: one lookup, one append,
no label lookup, no Prometheus call, nothing the garbage collector scans. A task on
the loop folds them into the Prometheus histograms and counters every ``interval_s``
(a column per phase, transposed and sorted in C, added bucket by bucket rather than one
``observe`` per value: about 2 µs per step in all), and samples the statistics the
components keep anyway (worker, queue, loop lag, blocking detector, ``getrusage``). A
scrape therefore sees values at most one interval old.

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
import itertools
import operator
import resource
import time
from collections.abc import Iterable, Sequence
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


_BOUNDS_NS = tuple(int(b * 1e9) for b in PHASE_BUCKETS)


_walls_of = operator.attrgetter("wall_ns")
_cpus_of = operator.attrgetter("cpu_ns")
_ttft_of = operator.attrgetter("ttft_ns")
_name_of = operator.attrgetter("name")
_wall_of = operator.attrgetter("wall_ns")
_ok_of = operator.attrgetter("ok")
_attempts_of = operator.attrgetter("attempts")


class _Tally:
    """The steps of one (agent, model) since the last fold, as the profiles hold them."""

    __slots__ = ("agent", "model", "results", "steps")

    def __init__(self, agent: str, model: str) -> None:
        self.agent = agent
        self.model = model
        self.steps: list[StepProfile] = []
        self.results: list[ToolResult] = []


class _Buckets:
    """Bucket counts and the sum of many nanosecond values: the values sorted (in C; step
    timings are runs of similar values, which sorting takes nearly linearly) and one
    bisect per bucket bound, no Python loop per value."""

    __slots__ = ("counts", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS_NS) + 1)  # the last: +Inf
        self.total_ns = 0

    def add(self, values_ns: Iterable[int]) -> None:
        ordered = sorted(values_ns)
        if not ordered:
            return
        counts, seen = self.counts, 0
        for i, bound in enumerate(_BOUNDS_NS):  # ``le`` buckets: values <= bound
            upto = bisect.bisect_right(ordered, bound, seen)
            counts[i] += upto - seen
            seen = upto
        counts[-1] += len(ordered) - seen
        self.total_ns += sum(ordered)

    def merge(self, other: _Buckets) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total_ns += other.total_ns

    def observe_into(self, child: Any) -> None:
        """Add the counts to one histogram child at once, instead of one ``observe`` per value.
        Uses the child's per-bucket values (non-cumulative in prometheus-client), which is
        what ``observe`` increments; the tests scrape and parse the result."""
        if not any(self.counts):
            return
        for bucket, n in zip(child._buckets, self.counts, strict=True):
            if n:
                bucket.inc(n)
        child._sum.inc(self.total_ns / 1e9)


def _observe_many(child: Any, values_ns: Iterable[int]) -> None:
    buckets = _Buckets()
    buckets.add(values_ns)
    buckets.observe_into(child)


class RunMetrics:
    """The metrics; also the engine's hook (``engine.hook = metrics``). Example::

        metrics = RunMetrics()
        engine.hook = metrics
        metrics.start(worker=worker, queue=queue)   # inside the running loop
    """

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        *,
        interval_s: float = 1.0,
        own_gauges: bool = True,
    ) -> None:
        """``own_gauges=False``: the gauges the gateway already exports (active runs, queue
        depth, loop lag, CPU utilization) are kept off ``registry``."""
        self.interval_s = interval_s
        self._tallies: dict[str, _Tally] = {}
        self._finished: list[RunRecord] = []
        self._task: asyncio.Task[None] | None = None
        self._sources: dict[str, Any] = {}
        self._last: dict[str, float] = {}
        self._tools: set[str] = set()
        self._names: set[str] = set()
        r = registry
        g = registry if own_gauges else CollectorRegistry()  # served by nobody
        self.phase_wall = Histogram("podium_step_phase_seconds", "Wall time of each step phase.",
                                    ["agent", "phase"], buckets=PHASE_BUCKETS, registry=r)
        # CPU per phase as a counter: rate(cpu) / rate(wall sum) is the phase's CPU share, the
        # figure the workload profile reports; a second histogram would double the fold.
        self.phase_cpu = Counter("podium_step_phase_cpu_seconds",
                                 "CPU time of each step phase (the rest of its wall is waiting).",
                                 ["agent", "phase"], registry=r)
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
                            registry=g, multiprocess_mode="livesum")
        self.capacity = Gauge("podium_worker_capacity", "Runs this process may drive at once.",
                              registry=g, multiprocess_mode="livesum")
        self.queue_waiting = Gauge("podium_queue_waiting", "Runs waiting in the queue.", ["pool"],
                                   registry=g, multiprocess_mode="max")
        self.queue_in_flight = Gauge("podium_queue_in_flight", "Runs claimed, not acknowledged.",
                                     ["pool"], registry=g, multiprocess_mode="max")
        self.queue_wait = Histogram("podium_queue_wait_seconds",
                                    "How long runs waited in the queue for a worker.", ["pool"],
                                    buckets=PHASE_BUCKETS, registry=r)
        self.backend_outstanding = Gauge("podium_backend_outstanding",
                                         "Calls in flight per model backend (occupancy).",
                                         ["backend"], registry=r, multiprocess_mode="livesum")
        self.backend_capacity = Gauge("podium_backend_capacity",
                                      "Calls a model backend takes at once (this process).",
                                      ["backend"], registry=r, multiprocess_mode="livesum")
        self.reclaims = Counter("podium_lease_reclaims",
                                "Runs redelivered after their worker's lease expired "
                                "(session migrations).", ["pool"], registry=r)
        self.dead_letters = Counter("podium_dead_letters", "Runs dead-lettered.", ["pool"],
                                    registry=r)
        self.loop_lag = Gauge("podium_event_loop_lag_p99_seconds", "Event-loop lag p99 (window).",
                              registry=g, multiprocess_mode="max")
        self.blocked = Counter("podium_event_loop_blocked",
                               "Callbacks that held the event loop past the blocking threshold.",
                               registry=r)
        self.ctx_switches = Counter("podium_context_switches", "Context switches of the process.",
                                    ["kind"], registry=r)
        self.cpu = Counter("podium_process_cpu_seconds", "CPU time of the process (user+system).",
                           registry=r)
        self.cpu_util = Gauge("podium_process_cpu_utilization",
                              "CPU seconds per second over the last interval (1.0 = one core).",
                              registry=g, multiprocess_mode="livesum")
        self._rusage = resource.getrusage(resource.RUSAGE_SELF)
        self._rusage_at = time.monotonic()

    # -- the engine's hook (hot path: appends only) ------------------------------------------

    def run_started(self, agent: Agent, record: RunRecord) -> None:
        pass

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: Usage,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        # Keyed by the agent's name (no tuple to allocate per step); the same name on another
        # model (``with_model``) gets a key of its own.
        tally = self._tallies.get(agent.name)
        if tally is None or tally.model != agent.model.name:
            tally = self._other_tally(agent.name, agent.model.name)
        tally.steps.append(profile)  # a gc=False struct: the collector never scans it
        for _, result in results:  # ditto; usually one, where map and extend cost more
            tally.results.append(result)
        if len(tally.steps) >= 8192:  # nobody folds (no loop task): keep memory bounded
            self.fold()

    def _other_tally(self, agent: str, model: str) -> _Tally:
        for key in (agent, f"{agent}\x00{model}"):
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = _Tally(agent, model)
            if tally.model == model:
                return tally
        raise AssertionError("unreachable")

    def run_finished(self, record: RunRecord) -> None:
        self._finished.append(record)

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

    def fold(self) -> None:
        """Move what the hook collected into the Prometheus metrics."""
        tallies, self._tallies = self._tallies, {}
        finished, self._finished = self._finished, []
        by_model: dict[str, tuple[_Buckets, _Buckets]] = {}
        by_tool: dict[str, list[ToolResult]] = {}
        model_i = STEP_PHASES.index("model")
        for tally in tallies.values():
            steps = tally.steps
            if not steps:
                continue
            model = tally.model
            name = self._name(tally.agent)
            self.steps.labels(name).inc(len(steps))
            walls = list(zip(*map(_walls_of, steps), strict=True))  # a column per phase, in C
            cpus = [sum(column) for column in zip(*map(_cpus_of, steps), strict=True)]
            model_walls, ttfts = by_model.setdefault(model, (_Buckets(), _Buckets()))
            for i, (phase, wall, cpu) in enumerate(zip(STEP_PHASES, walls, cpus, strict=True)):
                buckets = _Buckets()
                buckets.add(wall)
                buckets.observe_into(self.phase_wall.labels(name, phase))
                self.phase_cpu.labels(name, phase).inc(cpu / 1e9)
                if i == model_i:  # the model call histogram counts the same values
                    model_walls.merge(buckets)
            ttfts.add([t for t in map(_ttft_of, steps) if t])
            if tally.results:
                results = sorted(tally.results, key=_name_of)  # in C: no Python loop
                for tool_name, group in itertools.groupby(results, _name_of):
                    by_tool.setdefault(tool_name, []).extend(group)
        for model, (model_walls, ttfts) in by_model.items():
            name = self._name(model)
            model_walls.observe_into(self.model.labels(name))
            ttfts.observe_into(self.ttft.labels(name))
        for tool_name, tool_results in by_tool.items():
            self._fold_tool(self._tool(tool_name), tool_results)
        waits: dict[str, list[int]] = {}
        for record in finished:
            if record.profile is not None:
                waits.setdefault(record.pool, []).append(record.profile.admit_ns)
        for pool, values in waits.items():
            _observe_many(self.queue_wait.labels(self._name(pool)), values)
        ends: dict[tuple[str, str, str], int] = {}
        tokens: dict[str, list[int]] = {}
        for record in finished:
            key = (record.agent, record.status, record.reason or "")
            ends[key] = ends.get(key, 0) + 1
            usage = record.usage
            counts = tokens.get(record.agent)
            if counts is None:
                tokens[record.agent] = [usage.input_tokens, usage.output_tokens]
            else:
                counts[0] += usage.input_tokens
                counts[1] += usage.output_tokens
        for (agent, status, reason), n in ends.items():
            self.runs.labels(self._name(agent), status, reason).inc(n)
        for agent, (tokens_in, tokens_out) in tokens.items():
            self.tokens.labels(self._name(agent), "input").inc(tokens_in)
            self.tokens.labels(self._name(agent), "output").inc(tokens_out)

    def _fold_tool(self, tool: str, results: list[ToolResult]) -> None:
        _observe_many(self.tool.labels(tool), map(_wall_of, results))
        ok = sum(map(_ok_of, results))
        if ok:
            self.tool_calls.labels(tool, "ok").inc(ok)
        if ok < len(results):
            failed: dict[str, int] = {}
            for r in results:
                if not r.ok:
                    failed[r.error or "error"] = failed.get(r.error or "error", 0) + 1
            for outcome, n in failed.items():
                self.tool_calls.labels(tool, outcome).inc(n)
        attempts = list(map(_attempts_of, results))
        retries = sum(attempts) - (len(attempts) - attempts.count(0))  # refused: no attempt
        if retries > 0:
            self.tool_retries.labels(tool).inc(retries)

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
        for model in self._sources.get("models", ()):
            self._sample_backends(model)
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

    def _sample_backends(self, model: Any) -> None:
        """Occupancy of a backend pool's endpoints (any model with such ``statistics()``)."""
        stats = getattr(model, "statistics", None)
        snapshot = stats() if callable(stats) else None
        for backend in getattr(snapshot, "backends", ()):
            name = self._name(f"{backend.group}/{backend.name}")
            self.backend_outstanding.labels(name).set(backend.outstanding)
            self.backend_capacity.labels(name).set(backend.capacity)

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
        agents: Sequence[Agent] = (),
    ) -> None:
        """Fold and sample every ``interval_s`` on the running loop (idempotent); with
        ``own_lag`` :meth:`stop` stops ``lag`` too."""
        self._sources = {"worker": worker, "queue": queue, "pool": pool, "lag": lag,
                         "blocking": blocking, "own_lag": own_lag,
                         "models": list({id(a.model): a.model for a in agents}.values())}
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

