"""What one ``podium worker`` process is told: its own module so that what reads the
settings (the metrics endpoint, :mod:`podium.observe.serve_metrics`) needs not import the
process that runs them (which imports the metrics)."""

from __future__ import annotations

import msgspec

__all__ = ("WorkerConfig",)


class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one worker process needs (sent to children as JSON)."""

    redis_url: str
    agents: tuple[str, ...]
    #: Runs kept in PostgreSQL (``postgresql://``) instead of Redis; the queue stays there.
    store_url: str | None = None
    #: Finished runs archived to PostgreSQL (``postgresql://``) before their Redis TTL.
    archive_url: str | None = None
    #: The queue on PostgreSQL too (``postgresql://``): no Redis at all (``redis_url`` unused).
    queue_url: str | None = None
    pool: str = "default"
    config_file: str | None = None
    concurrency: int = 256
    burst: bool = False
    burst_patience_s: float = 60.0  # a burst worker gives up on a Redis silent this long
    grace_s: float = 20.0  # below the platform's stop grace (Kubernetes: 30 s by default)
    max_deliveries: int = 3
    lease_s: float = 30.0
    outage_hold_s: float = 90.0  # a run's unwritten outcomes wait this long for Redis
    prefix: str = "podium"
    finished_ttl_s: float = 7 * 86_400
    profile: bool = True  # the workload profile of each run (server.profile)
    consumer: str | None = None
    cpu: int | None = None
    node_cpus: tuple[int, ...] = ()
    threads: int | None = None
    use_uvloop: bool = True
    log_level: str = "INFO"
    metrics_port: int | None = None  # serve Prometheus metrics here (0: any free port)
    metrics_host: str = "127.0.0.1"  # where the port listens (0.0.0.0: other hosts too)
    metrics_token_env: str | None = None  # /metrics asks for this variable's bearer token
    metrics: bool = False  # collect metrics (a supervisor serves them: multiprocess mode)
    allow_evicting_redis: bool = False  # an evicting maxmemory-policy: not "not ready"
    # This process's place among the host's worker processes, which share each backend's
    # declared capacity (podium.worker.capacity).
    procs: int = 1
    proc_index: int = 0
