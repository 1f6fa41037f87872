"""``podium worker`` processes: one pinned process per core around Redis, drained on SIGTERM.

:func:`serve` is one worker process: it pins itself to its CPU, runs a
:class:`~podium.worker.worker.Worker` on uvloop against a Redis store and
queue, and on SIGTERM/SIGINT drains (stops claiming, lets running steps
finish and checkpoint within the grace period, releases the rest).

:func:`supervise` starts ``--procs`` such processes, placed by
:func:`~podium.worker.topology.place_workers` (node by node, one per physical
core first), forwards SIGTERM to them, and restarts one that dies unless in
burst mode. Children are fresh interpreters (``python -m podium.worker.process
CONFIG``), so nothing is inherited but the configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from podium.errors import QueueUnavailableError
from podium.gctune import tune_for_serving
from podium.worker.settings import WorkerConfig
from podium.worker.topology import Placement, place_workers, read_topology

if TYPE_CHECKING:
    from podium.queue.base import RunQueue
    from podium.store.base import RunStore
    from podium.streaming.base import TokenChannel

__all__ = ("WorkerConfig", "serve", "supervise")

log = logging.getLogger("podium.worker")


# -- one worker process ---------------------------------------------------------------------


#: How long a worker's store and queue commands wait for Redis before failing (seconds).
WORKER_PATIENCE_S = 10.0

def _pin(cpus: set[int]) -> None:
    """Pin the calling thread (Linux: affinity is per thread) to ``cpus``."""
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


def _loop_factory(use_uvloop: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if not use_uvloop:
        return None
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def serve(config: WorkerConfig, *, metrics_socket: socket.socket | None = None) -> int:
    """Run one worker process until drained (or, in burst mode, until the pool is empty).

    ``metrics_socket``: where to serve ``config.metrics_port``'s endpoint, bound (and
    listening) by the caller; without it the port is bound when the worker starts."""
    logging.basicConfig(
        level=config.log_level, stream=sys.stderr,
        format=f"%(asctime)s worker[{os.getpid()}] %(levelname)s %(message)s",
    )
    if config.cpu is not None:
        _pin({config.cpu})
    with asyncio.Runner(loop_factory=_loop_factory(config.use_uvloop)) as runner:
        return runner.run(_serve(config, metrics_socket))


async def _serve(config: WorkerConfig, metrics_socket: socket.socket | None) -> int:
    from podium.config import load_config
    from podium.engine.driver import Engine
    from podium.engine.hook import combine
    from podium.factory import worker_agents
    from podium.observe.blocking import detector_from_env
    from podium.observe.serve_metrics import start_metrics
    from podium.observe.tracing import tracer_from_env
    from podium.tools.executor import ToolExecutor
    from podium.tools.threads import ToolThreads
    from podium.worker.capacity import share_capacity
    from podium.worker.health import WorkerHealth
    from podium.worker.worker import Worker

    # The same podium.toml as the gateway: agent names, pools and models agree (each
    # backend's capacity shared among this host's worker processes).
    shared_config = share_capacity(load_config(config.config_file), config.procs,
                                   config.proc_index)
    agents = worker_agents(shared_config, config.agents, config.pool)
    node_cpus = set(config.node_cpus)
    threads = ToolThreads(  # a stuck sync call gets replaced, not waited for
        config.threads or os.cpu_count() or 1,
        initializer=_pin, initargs=(node_cpus,),  # sync tools may use the whole node
    )
    store, queue, tokens, client = await _backends(config)
    executor = ToolExecutor(thread_pool=threads)
    engine = Engine(store, executor, profile=config.profile)
    if tokens is not None:
        engine.tokens = tokens
    worker = Worker(
        queue, engine, agents, pool=config.pool, concurrency=config.concurrency,
        consumer=config.consumer, heartbeat_s=config.lease_s / 3,
        max_deliveries=config.max_deliveries, claim_block_s=min(1.0, config.lease_s / 3),
        waiting_sweep_s=min(5.0, config.lease_s / 3),  # waiting runs' deadlines, as often
        burst_patience_s=config.burst_patience_s,
    )
    loop = asyncio.get_running_loop()
    drained: list[asyncio.Task[None]] = []
    signals: list[int] = []

    def on_signal(signum: int) -> None:
        signals.append(signum)
        if not drained:
            log.info("signal %d: draining (grace %.1fs)", signum, config.grace_s)
            drained.append(loop.create_task(worker.drain(config.grace_s)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    # OTEL_* configured: spans. Before the detector starts (importing the SDK holds the loop
    # ~0.1 s: a stall of start-up, not of serving) and before start-up objects are frozen.
    tracer = tracer_from_env()
    tune_for_serving()  # freeze start-up objects, raise the thresholds (see podium.gctune)
    blocking = detector_from_env()  # logs and counts callbacks holding the loop (20 ms)
    health = WorkerHealth(worker, store, queue, config.pool)  # /livez, /readyz
    health.start()
    metrics = start_metrics(config, engine, worker, queue, blocking, metrics_socket, health)
    engine.hook = combine(engine.hook, tracer)
    if blocking is not None:  # watching from here: start-up is no stall of serving
        blocking.start()
    print(
        f"podium worker {worker.consumer} ready pool={config.pool} cpu={config.cpu} "
        f"agents={','.join(agents)}", file=sys.stderr, flush=True,
    )
    try:
        await worker.run(burst=config.burst)
        if drained:
            await drained[0]
    except QueueUnavailableError as exc:  # a burst worker whose queue never answered
        print(f"podium worker {worker.consumer}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        await engine.aclose()
        if tokens is not None:
            await tokens.aclose()
        if client is None:  # (a Redis queue's connections are the client's)
            await queue.aclose()
        executor.close()
        threads.shutdown(wait=False, cancel_futures=True)
        if client is not None:
            await client.aclose()
        if metrics is not None:
            await metrics.stop()
        await health.stop()
        if blocking is not None:
            blocking.stop()
    stats = worker.statistics()
    print(f"podium worker {worker.consumer} done {msgspec.json.encode(stats).decode()}",
          file=sys.stderr, flush=True)
    # Ctrl-C: 130, as every podium command (it drained first); SIGTERM, an orchestrator's
    # stop, is a clean exit.
    return 130 if signal.SIGINT in signals else 0


async def _backends(
    config: WorkerConfig,
) -> tuple[RunStore, RunQueue, TokenChannel | None, Any]:
    """The store, queue, token channel (or None) and Redis client (or None) of a worker."""
    store: RunStore
    queue: RunQueue
    if config.queue_url is not None:  # PostgreSQL only: no Redis, no token streaming
        from podium.queue.postgres import PostgresQueue
        from podium.store.postgres import PostgresRunStore

        store = PostgresRunStore(config.store_url or config.queue_url,
                                 unavailable_s=max(WORKER_PATIENCE_S, config.outage_hold_s))
        queue = PostgresQueue(config.queue_url, lease_s=config.lease_s,
                              unavailable_s=WORKER_PATIENCE_S)
        return store, queue, None, None
    # Imported here so that `podium --help` (and a PostgreSQL-only worker) never needs redis.
    from redis.exceptions import RedisError

    from podium.queue.redis import RedisQueue
    from podium.store.redis import RedisRunStore, connect
    from podium.streaming.redis import RedisTokenChannel

    client = connect(config.redis_url, max_connections=None)
    # A worker waits out a short Redis restart inside the client, its commands resent as
    # they were (idempotent), and holds a run's checkpoint writes through a longer outage
    # (outage_hold_s), so the outcome of a call that finished meanwhile is journaled when
    # Redis is back rather than the call run again; the gateway's clients fail fast (503).
    if config.store_url is not None:
        from podium.store.postgres import PostgresRunStore

        # Waits out a Postgres outage (a restart, a full disk) for as long as a Redis
        # store holds a run's writes (outage_hold_s), the writes asking whether they
        # landed before they are sent again: a call that completed meanwhile is journaled
        # when Postgres is back, not run again (bench_chaos --postgres --outage-kind
        # pg-full, 14 s: 4 completed calls repeated with 10 s of patience). Finished runs
        # are kept (history).
        store = PostgresRunStore(config.store_url,
                                 unavailable_s=max(WORKER_PATIENCE_S, config.outage_hold_s))
    else:
        store = RedisRunStore(client, prefix=config.prefix,
                              finished_ttl_s=config.finished_ttl_s,
                              unavailable_s=WORKER_PATIENCE_S,
                              outage_hold_s=config.outage_hold_s,
                              allow_evicting=config.allow_evicting_redis)
        if config.archive_url is not None:
            from podium.store.postgres import PostgresRunStore
            from podium.store.tiered import TieredRunStore

            store = TieredRunStore(store, PostgresRunStore(
                config.archive_url, unavailable_s=WORKER_PATIENCE_S))
    queue = RedisQueue(client, prefix=config.prefix, lease_s=config.lease_s,
                       unavailable_s=WORKER_PATIENCE_S)
    # Hears the gateways' listeners; a run streams its tokens only while one listens.
    tokens = RedisTokenChannel(client, prefix=config.prefix)
    try:
        await tokens.start()
    except (RedisError, OSError) as exc:
        log.warning("no token streaming from this worker: %s", exc)
        await tokens.aclose()
        return store, queue, None, client
    return store, queue, tokens, client


# -- many worker processes ------------------------------------------------------------------


def _spawn(
    config: WorkerConfig, placement: Placement, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    child = msgspec.structs.replace(
        config, cpu=placement.cpu, node_cpus=placement.node_cpus,
        threads=config.threads or placement.threads, proc_index=placement.index,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "podium.worker.process", msgspec.json.encode(child).decode()],
        env=env,
    )


def supervise(
    config: WorkerConfig,
    procs: int | None = None,
    *,
    metrics_socket: socket.socket | None = None,
) -> int:
    """Start ``procs`` pinned worker processes (default: one per CPU) and wait for them.

    SIGTERM/SIGINT is forwarded to every child (each drains); a child that dies
    is restarted after a second, except in burst mode or while stopping.
    Returns 0 if every child exited cleanly. ``metrics_socket``: as in :func:`serve`,
    the children's endpoint, served by this process.
    """
    from podium.observe.serve_metrics import HealthProbes, SupervisorMetrics, metrics_token
    from podium.store.postgres_health import SyncPostgresHealth
    from podium.store.redis_health import SyncRedisHealth

    placements = place_workers(read_topology(), procs)
    children: dict[int, subprocess.Popen[bytes]] = {}
    stopping = False
    # (A PostgreSQL-only fleet: each child's own /readyz asks its store and queue.)
    redis_health = None if config.queue_url is not None else SyncRedisHealth(
        config.redis_url, config.prefix, allow_evicting=config.allow_evicting_redis)

    # The stores the children use: Redis (the queue, and the store unless a PostgreSQL
    # one is named), PostgreSQL where it keeps the runs or their archive.
    postgres = {name: SyncPostgresHealth(url) for name, url in
                (("store", config.store_url), ("archive", config.archive_url)) if url}

    def ready() -> tuple[bool, dict[str, str]]:
        """Ready while every child runs (one restarting is not) and its stores take writes."""
        running = sum(proc.poll() is None for proc in list(children.values()))
        checks = {"workers": "ok" if running == len(placements) and not stopping
                  else f"{running} of {len(placements)} running"}
        if redis_health is not None:
            checks["queue" if "store" in postgres else "store"] = redis_health.problem() or "ok"
        for name, health in postgres.items():
            checks[name] = health.problem() or "ok"
        return all(v == "ok" for v in checks.values()), checks

    # One endpoint for all children, up before the first of them starts. Live while this
    # process serves it (never Redis: an outage must not restart every pod).
    probes = HealthProbes(lambda: (True, {"supervisor": "ok"}), ready)
    shared = SupervisorMetrics.start(config.metrics_port, metrics_socket, probes,
                                     host=config.metrics_host, token=metrics_token(config))
    if shared is not None:
        config = msgspec.structs.replace(config, metrics_port=None, metrics=True)
    env = shared.child_env() if shared is not None else None
    config = msgspec.structs.replace(config, procs=len(placements))  # they share capacity
    children.update({p.index: _spawn(config, p, env) for p in placements})

    interrupted = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping, interrupted
        stopping = True
        interrupted = interrupted or signum == signal.SIGINT
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    codes: dict[int, int] = {}
    try:
        while len(codes) < len(children):
            for index, proc in list(children.items()):
                if index in codes:
                    continue
                code = proc.poll()
                if code is None:
                    continue
                if stopping or config.burst or code == 0:
                    codes[index] = code
                    if shared is not None:
                        shared.process_died(proc.pid)
                else:
                    print(f"podium: worker {proc.pid} exited with {code}; restarting",
                          file=sys.stderr, flush=True)
                    if shared is not None:
                        shared.process_died(proc.pid)
                    time.sleep(1.0)
                    children[index] = _spawn(config, placements[index], env)
            time.sleep(0.1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if shared is not None:
            shared.close()
        if redis_health is not None:
            redis_health.close()
    if interrupted:  # Ctrl-C (the children, in the terminal's group, got it too: 130)
        return 130
    return 0 if all(c == 0 for c in codes.values()) else 1


def run_child(argv: list[str]) -> int:
    """Entry point of a child: ``python -m podium.worker.process CONFIG_JSON``."""
    return serve(msgspec.json.decode(argv[0], type=WorkerConfig))


if __name__ == "__main__":
    sys.exit(run_child(sys.argv[1:]))
