"""Prometheus metrics of a process that drives runs (a worker, or the gateway's engine).

When a run starts the engine asks :meth:`RunMetrics.run_started` what to call at each of
its steps: the filing function of its agent (made once per agent), which appends the
step's phase figures and tool latencies to that agent's :class:`~podium.observe.tally.StepTally`
— no label lookup, no Prometheus call, nothing the garbage collector scans — and every few
hundred steps compacts them into bucket counts and sums (see :mod:`podium.observe.tally`).
A task on the loop folds those into the Prometheus histograms and counters every
``interval_s`` (bucket by bucket, not one ``observe`` per value), and samples the
statistics the components keep anyway (worker, queue, loop lag, blocking detector,
``getrusage``). A scrape therefore sees values at most one interval old.

Under ``podium worker --procs N`` each child's fold writes its values to
prometheus-client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``), so the supervisor,
which serves their sum on one port, is at most one interval behind too; a child's last
fold runs when it stops.

Labels stay bounded: agents and models are what the process serves, tool names
are capped (the rest count as ``other``); no run ids anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from podium.engine.profile import STEP_PHASES
from podium.lifecycle import stop_task
from podium.observe.tally import (
    END_ITEMS,
    PHASE_BUCKETS,
    TIMED_FULL,
    Buckets,
    StepTally,
    ToolFigures,
    count_ends,
)

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.hook import StepHook
    from podium.engine.records import RunRecord
    from podium.observe.blocking import BlockingDetector
    from podium.observe.looplag import LoopLagMonitor
    from podium.queue.base import RunQueue
    from podium.worker.worker import Worker

__all__ = ("PHASE_BUCKETS", "RunMetrics")

_MAX_TOOLS = 64
_MAX_NAMES = 32
#: Runs that may end with nobody folding (no loop task) before the next to end folds
#: (:meth:`RunMetrics.start` folds every second): memory stays bounded.
_FOLD_AT = 4096
_ENDS_FULL = _FOLD_AT * END_ITEMS
_MODEL = STEP_PHASES.index("model")
#: Agent objects whose filing function is kept (more: agents made per request; forgotten).
_MAX_FILERS = 1024


def _observe_many(child: Any, values_ns: Sequence[int]) -> None:
    buckets = Buckets()
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
        self._tallies: dict[tuple[str, str], StepTally] = {}
        self._filers: dict[tuple[int, str | None], tuple[StepHook, StepTally]] = {}
        self._ends: list[Any] = []  # the runs that ended since the last fold (count_ends)
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
        self.phase_blocked = Counter(
            "podium_step_phase_blocked_seconds",
            "Time each step phase held the event loop without running on the CPU (a "
            "synchronous sleep or read in a coroutine): neither CPU nor waiting.",
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
        # (a gateway exports its store's count itself: kept off its registry here)
        self.runs_lost = Counter("podium_runs_lost", "Runs missing from the store though a "
                                 "queue entry or an index referenced them (evicted?).",
                                 registry=g)
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
        self.backend_up = Gauge("podium_backend_up",
                                "1 while a model backend takes calls (healthy), 0 while it is"
                                " drained or not yet admitted.", ["backend"], registry=r,
                                multiprocess_mode="livemin")
        self.backend_drains = Counter("podium_backend_drains",
                                      "Times a model backend was taken out of its pool.",
                                      ["backend"], registry=r)
        self.backend_failovers = Counter("podium_backend_failovers",
                                         "Calls moved from a model backend to another.",
                                         ["backend"], registry=r)
        self.backend_retries = Counter("podium_backend_retries",
                                       "Calls tried again on a model backend (after a backoff).",
                                       ["backend"], registry=r)
        self.backend_timeouts = Counter("podium_backend_timeouts",
                                        "Calls a model backend did not answer, or made no"
                                        " progress on, in time.", ["backend"], registry=r)
        self.backend_cancelled = Counter("podium_backend_cancelled",
                                         "Calls cut in flight by their caller (a run's deadline"
                                         " or cancellation).", ["backend"], registry=r)
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
        # From the process's start, as process_cpu_seconds_total is by convention (its
        # start-up, imports included): the sampler adds what each interval used.
        self.cpu.inc(self._rusage.ru_utime + self._rusage.ru_stime)

    # -- the engine's hook (hot path: appends only) ------------------------------------------

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook:
        """What the run's steps call: the filing function of its agent (made once per agent
        object, so nothing is looked up or allocated per run). Its tally is compacted here
        once full: asked per run, not per step; the runs of a busy agent start as often as
        they file, so the steps are still in the CPU's caches. (With nobody folding, what a
        tally holds is bounded by the steps of the runs since its agent's last run start,
        and by the fold that every ``_FOLD_AT`` runs ending do.)"""
        # Under the name the run was made with (the served one: podium.toml may serve one
        # agent object under several names), as the runs' ends and tokens are counted.
        return self._step_of(agent, record.agent)

    def _filer(self, agent: Agent, name: str | None = None) -> tuple[StepHook, StepTally]:
        """The filing function of ``agent``'s steps under ``name`` (None: its own) and its
        tally (made on its first run; also asked for the steps an agent takes over by a
        hand-off)."""
        # By id: any agent object will do (the filer holds it, so its id is not reused).
        key = (id(agent), name)
        filer = self._filers.get(key)
        if filer is None:
            if len(self._filers) >= _MAX_FILERS:  # agents made per request: start afresh
                self._filers.clear()
            tally = self._tally(agent, name)
            filer = self._filers[key] = (tally.filer(agent, self._step_of), tally)
        return filer

    def _step_of(self, agent: Agent, name: str | None = None) -> StepHook:
        """``agent``'s filing function, its tally compacted when full: as a run starts, and
        for a step after a hand-off (the other agent may start no runs of its own)."""
        step, tally = self._filer(agent, name)
        if len(tally.phases) >= TIMED_FULL:
            tally.compact()
        return step

    def _tally(self, agent: Agent, name: str | None = None) -> StepTally:
        """The tally of ``agent`` (as ``name``) and its model, by their label values (so at
        most ``_MAX_NAMES`` squared of them: kept for good, as runs hold them)."""
        key = (self._name(name or agent.name), self._name(agent.model.name))
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = StepTally(*key)
        return tally

    def run_finished(self, record: RunRecord) -> None:
        ends, usage, profile = self._ends, record.usage, record.profile
        ends.extend((record.agent, record.status, record.reason, record.pool, usage.input_tokens,
                     usage.output_tokens, -1 if profile is None else profile.admit_ns))
        if len(ends) >= _ENDS_FULL:  # nobody folds (no loop task): memory stays bounded
            self.fold()

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
        ends, self._ends = count_ends(self._ends), []
        by_model: dict[str, tuple[Buckets, Buckets]] = {}
        tools: dict[str, ToolFigures] = {}
        for tally in self._tallies.values():
            figures = tally.take()
            for name, tool in figures.tools.items():
                if name in tools:
                    tools[name].merge(tool)
                else:
                    tools[name] = tool
            if not figures.steps:
                continue
            agent = tally.agent
            self.steps.labels(agent).inc(figures.steps)
            for phase, walls, cpu_ns, blocked_ns in zip(
                STEP_PHASES, figures.walls, figures.cpu_ns, figures.blocked_ns, strict=True
            ):
                if any(walls.counts):  # none when the engine keeps no profiles
                    walls.observe_into(self.phase_wall.labels(agent, phase))
                    self.phase_cpu.labels(agent, phase).inc(cpu_ns / 1e9)
                    if blocked_ns:
                        self.phase_blocked.labels(agent, phase).inc(blocked_ns / 1e9)
            model_walls, ttfts = by_model.setdefault(tally.model, (Buckets(), Buckets()))
            model_walls.merge(figures.walls[_MODEL])  # the model calls' latencies
            ttfts.merge(figures.ttft)
        for model, (model_walls, ttfts) in by_model.items():
            model_walls.observe_into(self.model.labels(model))
            ttfts.observe_into(self.ttft.labels(model))
        for tool_name, tool in tools.items():
            name = self._tool(tool_name)
            tool.buckets.observe_into(self.tool.labels(name))
            for outcome, n in tool.outcomes.items():
                self.tool_calls.labels(name, outcome).inc(n)
            if tool.retries > 0:
                self.tool_retries.labels(name).inc(tool.retries)
        waits: dict[str, list[int]] = {}
        runs: dict[tuple[str, str, str], int] = {}
        tokens: dict[str, list[int]] = {}
        for (agent_name, status, reason, pool), end in ends.items():
            agent = self._name(agent_name)
            waits.setdefault(self._name(pool), []).extend(end.waits)
            key = (agent, status, reason or "")
            runs[key] = runs.get(key, 0) + end.runs
            counts = tokens.setdefault(agent, [0, 0])
            counts[0] += end.tokens_in
            counts[1] += end.tokens_out
        for pool, values in waits.items():
            _observe_many(self.queue_wait.labels(pool), values)
        for (agent, status, reason), n in runs.items():
            self.runs.labels(agent, status, reason).inc(n)
        for agent, (tokens_in, tokens_out) in tokens.items():
            self.tokens.labels(agent, "input").inc(tokens_in)
            self.tokens.labels(agent, "output").inc(tokens_out)

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
            self.runs_lost.inc(self._delta("lost", worker.engine.store.statistics().lost))
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
            self.backend_up.labels(name).set(1 if backend.state == "healthy" else 0)
            for counter, key, total in (
                (self.backend_drains, "drains", backend.drains),
                (self.backend_failovers, "failovers", backend.failovers),
                (self.backend_retries, "retries", backend.retries),
                (self.backend_timeouts, "timeouts", backend.timeouts),
                (self.backend_cancelled, "cancelled", backend.cancelled),
            ):
                counter.labels(name).inc(self._delta(f"{key}:{name}", total))

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

