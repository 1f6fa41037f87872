"""Serving the worker metrics: one process on its own port, or many behind their supervisor.

The same port answers ``/livez`` and ``/readyz`` (Kubernetes probes, see
:mod:`podium.worker.health`): a worker process asks its own loop; a supervisor of
``--procs N`` answers live while it runs, and ready while its children run and Redis
takes writes (a probe of its own, cached like theirs).

``podium worker --metrics-port P`` serves ``/metrics`` on P from the worker
process. With ``--procs N`` the supervisor serves P instead: each child
writes its values to files in a private directory (prometheus-client's
multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``) and the supervisor sums them
per scrape; a child that dies is marked dead so its live gauges drop out.

The endpoint serves on a socket ``podium worker`` bound (and set listening) before
anything else started, so the port it announces is the one it holds from its start.
It listens on ``--metrics-host`` (default 127.0.0.1: this host only, as a scrape of
another host's worker is a choice to make, not a default), and with
``--metrics-token-env VAR`` asks ``/metrics`` for ``Authorization: Bearer $VAR`` (the
probes answer anyone: a kubelet sends no token).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from podium.errors import ConfigError

if TYPE_CHECKING:
    from podium.engine.driver import Engine
    from podium.observe.blocking import BlockingDetector
    from podium.observe.metrics import RunMetrics
    from podium.queue.base import RunQueue
    from podium.worker.health import WorkerHealth
    from podium.worker.settings import WorkerConfig
    from podium.worker.worker import Worker

__all__ = ("HealthProbes", "SupervisorMetrics", "WorkerMetrics", "metrics_token", "start_metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: ``() -> (ok, {component: "ok" | why not})``: what a probe endpoint answers.
Probe = Callable[[], tuple[bool, dict[str, str]]]


class HealthProbes:
    """The answers of ``/livez`` and ``/readyz`` (called from the endpoint's threads)."""

    def __init__(self, live: Probe, ready: Probe) -> None:
        self.live = live
        self.ready = ready


def metrics_token(config: WorkerConfig) -> str | None:
    """The bearer token ``/metrics`` asks for: the value of ``--metrics-token-env``'s
    variable (None: no token asked)."""
    if config.metrics_token_env is None:
        return None
    return os.environ.get(config.metrics_token_env) or None


def _with_probes(metrics_app: Any, probes: HealthProbes | None, token: str | None = None) -> Any:
    """A WSGI app: ``/livez`` and ``/readyz`` from ``probes``, the rest ``metrics_app``
    (behind ``token``, when given)."""
    import hmac
    import json

    expected = None if token is None else f"Bearer {token}".encode()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        probe = None if probes is None else {"/livez": probes.live,
                                             "/readyz": probes.ready}.get(path)
        if probe is None:
            given = environ.get("HTTP_AUTHORIZATION", "").encode()
            if expected is not None and not hmac.compare_digest(given, expected):
                start_response("401 Unauthorized", [
                    ("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer"),
                ])
                return [b"a bearer token is required\n"]
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        ok, checks = probe()
        body = json.dumps({"status": "ready" if ok else "unavailable", "checks": checks})
        start_response("200 OK" if ok else "503 Service Unavailable", [
            ("Content-Type", "application/json"), ("Cache-Control", "no-store"),
        ])
        return [body.encode()]

    return app


def start_metrics(
    config: WorkerConfig,
    engine: Engine,
    worker: Worker,
    queue: RunQueue,
    blocking: BlockingDetector | None,
    sock: socket.socket | None = None,
    health: WorkerHealth | None = None,
) -> WorkerMetrics | None:
    """Collect (and, given a port, serve) this worker's metrics; None when off. ``sock``:
    the port, bound already (else it is bound here). ``health``: what the port's
    ``/livez`` and ``/readyz`` answer."""
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
    server = None
    if config.metrics_port is not None:
        probes = None if health is None else HealthProbes(health.live, health.ready)
        server = _listen(config.metrics_port, None, sock, probes, config.metrics_host,
                         metrics_token(config))
        print(f"podium worker metrics on :{server.server_port}/metrics", file=sys.stderr,
              flush=True)
    return WorkerMetrics(metrics, server)


class WorkerMetrics:
    """A worker process's metrics and the endpoint serving them (None: its supervisor's)."""

    def __init__(self, metrics: RunMetrics, server: _MetricsServer | None) -> None:
        self.metrics = metrics
        self._server = server

    async def stop(self) -> None:
        """A last flush, then the endpoint closed."""
        await self.metrics.stop()
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)  # waits out the thread's poll interval
            server.server_close()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _MetricsServer(ThreadingMixIn, WSGIServer):
    """prometheus-client's WSGI server (a thread per scrape), serving a socket that is
    bound already instead of binding one of its own."""

    daemon_threads = True

    def __init__(self, sock: socket.socket) -> None:
        self.address_family = sock.family
        super().__init__(sock.getsockname()[:2], _QuietHandler, bind_and_activate=False)
        self.socket.close()  # the unbound one socketserver made: the given one serves
        self.socket = sock
        host, port = sock.getsockname()[:2]
        self.server_address = (host, port)
        self.server_name, self.server_port = host, port  # no reverse DNS lookup at start
        self.setup_environ()


def _listen(
    port: int, registry: Any, sock: socket.socket | None = None,
    probes: HealthProbes | None = None, host: str = "127.0.0.1", token: str | None = None,
) -> _MetricsServer:
    """Serve ``registry`` (the default one if None) at ``/metrics`` on ``sock``, or on
    ``host:port`` bound here, and ``probes`` at ``/livez`` and ``/readyz``; a port taken
    is one line, not a traceback from socketserver."""
    from prometheus_client import REGISTRY, make_wsgi_app

    if sock is None:
        from podium.cli.common import LISTEN_BACKLOG, bind_listeners

        sock = bind_listeners(host, port, "--metrics-port")[0]  # or a ConfigError
        sock.listen(LISTEN_BACKLOG)
    server = _MetricsServer(sock)
    server.set_app(_with_probes(make_wsgi_app(registry or REGISTRY), probes, token))
    threading.Thread(target=server.serve_forever, name="podium-metrics", daemon=True).start()
    return server


class SupervisorMetrics:
    """The supervisor's endpoint over its children's multiprocess files."""

    def __init__(self, directory: str, server: Any) -> None:
        self.directory = directory
        self._server = server

    @classmethod
    def start(
        cls, port: int | None, sock: socket.socket | None = None,
        probes: HealthProbes | None = None, *, host: str = "127.0.0.1",
        token: str | None = None,
    ) -> SupervisorMetrics | None:
        """Serve ``port`` (on ``sock`` when it is bound already), ``probes`` at ``/livez``
        and ``/readyz``; None without a port."""
        if port is None:
            return None
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        directory = tempfile.mkdtemp(prefix="podium-metrics-")
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        try:
            server = _listen(port, registry, sock, probes, host, token)
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
