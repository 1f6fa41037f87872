"""Serving the worker metrics: one process on its own port, or many behind their supervisor.

``podium worker --metrics-port P`` serves ``/metrics`` on P from the worker
process. With ``--procs N`` the supervisor serves P instead: each child
writes its values to files in a private directory (prometheus-client's
multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``) and the supervisor sums them
per scrape; a child that dies is marked dead so its live gauges drop out.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from podium.errors import ConfigError

if TYPE_CHECKING:
    from podium.engine.driver import Engine
    from podium.observe.blocking import BlockingDetector
    from podium.observe.metrics import RunMetrics
    from podium.queue.base import RunQueue
    from podium.worker.process import WorkerConfig
    from podium.worker.worker import Worker

__all__ = ("SupervisorMetrics", "start_metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def start_metrics(
    config: WorkerConfig,
    engine: Engine,
    worker: Worker,
    queue: RunQueue,
    blocking: BlockingDetector | None,
) -> RunMetrics | None:
    """Collect (and, given a port, serve) this worker's metrics; None when off."""
    if config.metrics_port is None and not config.metrics:
        return None
    from podium.observe.looplag import LoopLagMonitor
    from podium.observe.metrics import RunMetrics

    metrics = RunMetrics()
    engine.hook = metrics
    lag = LoopLagMonitor(0.05)
    lag.start()
    metrics.start(worker=worker, queue=queue, pool=config.pool, lag=lag, blocking=blocking,
                  own_lag=True, agents=list(worker.agents.values()))
    if config.metrics_port is not None:
        server = _listen(config.metrics_port, None)
        print(f"podium worker metrics on :{server.server_port}/metrics", file=sys.stderr,
              flush=True)
    return metrics


def _listen(port: int, registry: Any) -> Any:
    """prometheus-client's HTTP server on ``port``; a port taken is one line, not a
    traceback from socketserver."""
    from prometheus_client import REGISTRY, start_http_server

    try:
        server, _ = start_http_server(port, registry=registry or REGISTRY)
    except OSError as exc:
        raise ConfigError(f"--metrics-port {port}: cannot listen: {exc.strerror or exc}") from None
    return server


class SupervisorMetrics:
    """The supervisor's endpoint over its children's multiprocess files."""

    def __init__(self, directory: str, server: Any) -> None:
        self.directory = directory
        self._server = server

    @classmethod
    def start(cls, port: int | None) -> SupervisorMetrics | None:
        if port is None:
            return None
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        directory = tempfile.mkdtemp(prefix="podium-metrics-")
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        try:
            server = _listen(port, registry)
        except ConfigError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        print(f"podium worker metrics on :{server.server_port}/metrics (all processes)",
              file=sys.stderr, flush=True)
        return cls(directory, server)

    def child_env(self) -> dict[str, str]:
        return {**os.environ, MULTIPROC_ENV: self.directory}

    def process_died(self, pid: int) -> None:
        from prometheus_client.multiprocess import mark_process_dead

        mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self.directory, ignore_errors=True)
