"""Prometheus metrics of the gateway, served at ``/metrics``.

Counters and histograms are updated on the request path; everything that
already has a ``statistics()`` (admission, queue, workers, loop lag) is read
at scrape time by a collector, so it costs nothing between scrapes. Each
gateway has its own registry (several can live in one test process).
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podium.security.screen import screening_statistics

if TYPE_CHECKING:
    from podium.gateway.admission import Admission
    from podium.observe.blocking import BlockingDetector
    from podium.observe.looplag import LoopLagMonitor
    from podium.observe.metrics import RunMetrics
    from podium.queue.base import RunQueue
    from podium.store.base import RunStore
    from podium.worker.worker import Worker

__all__ = ("CONTENT_TYPE", "GatewayMetrics", "Scraped")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Scraped(Protocol):
    """What a scrape reads of the gateway (:class:`~podium.gateway.service.Gateway` is
    one): the service owns its metrics, so the metrics name only what they read."""

    admission: Admission
    blocking: BlockingDetector | None
    lag: LoopLagMonitor
    pools: list[str]
    queue: RunQueue
    run_metrics: RunMetrics | None
    store: RunStore
    workers: list[Worker]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _StatisticsCollector(Collector):
    """Gauges read from the gateway's components when Prometheus scrapes."""

    def __init__(self, gateway: Callable[[], Scraped | None]) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        gw = self._gateway()
        if gw is None:
            return
        adm = gw.admission.statistics()
        a = adm.adaptive
        yield _gauge("podium_admission_limit", "Adaptive admitted-rate limit (runs/s).", a.limit)
        yield _gauge("podium_admission_max_rate", "Ceiling of the adaptive limit.", a.max_rate)
        yield _gauge(
            "podium_process_cpu_utilization",
            "CPU seconds per second of the serving process (1.0 = one core).",
            a.cpu_utilization,
        )
        yield _gauge(
            "podium_event_loop_cpu_demand",
            "Share of the last interval the event loop's thread ran or waited to run "
            "(1.0: saturated, even when it got only part of a core).",
            a.cpu_demand,
        )
        yield _gauge(
            "podium_admission_overloaded", "1 while the limiter sees overload.", float(a.overloaded)
        )
        yield CounterMetricFamily(
            "podium_runs_lost",
            "Runs missing from the store though a queue entry or an index referenced them "
            "(evicted by Redis?).",
            value=gw.store.statistics().lost,
        )
        lag = gw.lag.statistics()
        yield _gauge(
            "podium_event_loop_lag_p99_seconds", "Event-loop lag p99 (window).", lag.p99_ms / 1e3
        )
        admitted = CounterMetricFamily("podium_runs_admitted", "Runs admitted.", labels=["pool"])
        for pool, n in adm.admitted.items():
            admitted.add_metric([pool], n)
        yield admitted
        rejected = CounterMetricFamily(
            "podium_runs_rejected", "Runs refused with a 429.", labels=["pool", "reason"]
        )
        for key, n in adm.rejected.items():
            pool, _, reason = key.partition(":")
            rejected.add_metric([pool, reason], n)
        yield rejected
        depth = GaugeMetricFamily(
            "podium_queue_waiting", "Runs waiting in the queue.", labels=["pool"]
        )
        in_flight = GaugeMetricFamily(
            "podium_queue_in_flight", "Runs claimed by workers.", labels=["pool"]
        )
        for pool in gw.pools:
            q = gw.queue.statistics(pool)
            depth.add_metric([pool], q.waiting)
            in_flight.add_metric([pool], q.in_flight)
        yield depth
        yield in_flight
        gate = GaugeMetricFamily(
            "podium_pool_max_waiting",
            "Backlog a pool admits within its latency target.",
            labels=["pool"],
        )
        run_s = GaugeMetricFamily(
            "podium_pool_run_seconds", "Moving average run duration.", labels=["pool"]
        )
        for pool, g in adm.gates.items():
            gate.add_metric([pool], g.max_waiting)
            run_s.add_metric([pool], g.run_s)
        yield gate
        yield run_s
        active = GaugeMetricFamily(
            "podium_worker_active_runs",
            "Runs in-process workers drive.",
            labels=["pool", "consumer"],
        )
        for worker in gw.workers:
            w = worker.statistics()
            active.add_metric([worker.pool, w.consumer], w.active)
        yield active
        yield _screen_verdicts()
        if gw.run_metrics is None:  # no engine here (workers drive the runs): counted below
            yield from _process_counters(gw)


def _process_counters(gw: Scraped) -> Iterator[Metric]:
    """The counters a process that drives runs exports through its ``RunMetrics``, read at
    scrape time for a gateway in front of workers: its loop's stalls, CPU, context switches."""
    if gw.blocking is not None:
        yield CounterMetricFamily(
            "podium_event_loop_blocked",
            "Callbacks that held the event loop past the blocking threshold.",
            value=gw.blocking.statistics().blocks,
        )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    yield CounterMetricFamily(
        "podium_process_cpu_seconds",
        "CPU time of the process (user+system).",
        value=usage.ru_utime + usage.ru_stime,
    )
    switches = CounterMetricFamily(
        "podium_context_switches", "Context switches of the process.", labels=["kind"]
    )
    switches.add_metric(["voluntary"], usage.ru_nvcsw)
    switches.add_metric(["involuntary"], usage.ru_nivcsw)
    yield switches


def _screen_verdicts() -> CounterMetricFamily:
    # Verdicts of this process's engines (in-process workers); worker processes keep theirs.
    family = CounterMetricFamily(
        "podium_screen_verdicts",
        "Prompt-injection screen verdicts.",
        labels=["source", "action", "rule"],
    )
    for (source, action, rule), n in sorted(screening_statistics().items()):
        family.add_metric([source, action, rule], n)
    return family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class GatewayMetrics:
    """The gateway's registry: request counters and latencies, plus the collector."""

    def __init__(self, gateway: Callable[[], Scraped | None]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "podium_http_requests",
            "HTTP requests answered.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "podium_http_request_duration_seconds",
            "Time to the response's first byte.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.run_latency = Histogram(
            "podium_run_duration_seconds",
            "Run duration from admission to its end.",
            ["pool"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "podium_approval_decisions",
            "Human decisions on waiting tool calls (approve, reject, answer).",
            ["agent", "decision"],
            registry=self.registry,
        )
        self.registry.register(_StatisticsCollector(gateway))

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
