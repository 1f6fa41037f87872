"""From a :class:`~podium.config.Config` to a running :class:`Gateway`: store, queue, workers.

Embedded mode (the default): the store named by ``server.store`` (SQLite, or
memory), an in-process queue, and in-process workers per pool. Distributed
mode (``server.redis``): a Redis store and queue, no workers here — they run
as ``podium worker`` processes. ``server.queue`` (a ``postgresql://`` URL): the same
on PostgreSQL alone (its store and queue; no token streaming between processes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from podium.config import Config
from podium.engine.driver import Engine
from podium.errors import ConfigError
from podium.factory import builtin_agents, served_agents
from podium.gateway.auth import KeyRing
from podium.gateway.service import Gateway, ServedAgent
from podium.queue.base import RunQueue
from podium.queue.local import LocalQueue
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.postgres_errors import is_postgres_url
from podium.worker.worker import Worker

log = logging.getLogger("podium.gateway")

__all__ = ("build_gateway", "distributed", "load_agents", "open_store")


def load_agents(config: Config) -> list[ServedAgent]:
    """The configured agents; with none configured, the built-in examples that import."""
    if config.agents:
        return [ServedAgent(s.agent, s.name, s.pool) for s in served_agents(config)]
    served = [ServedAgent(s.agent, s.name, s.pool) for s in builtin_agents()]
    if not served:
        raise ConfigError("no agents to serve: add [[agents]] to podium.toml or pass --agent")
    return served


def open_store(config: Config) -> RunStore:
    server = config.server
    spec = server.store
    if is_postgres_url(spec):  # with server.redis too: runs kept in Postgres, queued in Redis
        from podium.store.postgres import PostgresRunStore

        return PostgresRunStore(spec)
    if server.redis:
        from podium.store.redis import RedisRunStore  # only the distributed mode needs redis

        hot = RedisRunStore(server.redis, prefix=server.prefix, finished_ttl_s=server.ttl_s,
                            allow_evicting=server.allow_evicting_redis)
        if server.archive is None:
            return hot
        from podium.store.postgres import PostgresRunStore
        from podium.store.tiered import TieredRunStore

        # The gateway archives too (one archiver works at a time): runs it finishes
        # itself (cancelled while queued) are archived with no worker configured for it.
        return TieredRunStore(hot, PostgresRunStore(server.archive))
    if spec == "memory":
        return MemoryRunStore()
    kind, _, path = spec.partition(":")
    if kind != "sqlite" or not path:
        raise ConfigError(
            f"server.store: use 'sqlite:PATH', 'memory' or a postgresql:// URL, got {spec!r}")
    from podium.store.sqlite import SQLiteRunStore

    return SQLiteRunStore(path)


def distributed(config: Config) -> bool:
    """Whether workers run elsewhere (``podium worker``): a Redis or PostgreSQL queue."""
    return bool(config.server.redis or config.server.queue)


def open_queue(config: Config) -> RunQueue:
    if config.server.queue:
        from podium.queue.postgres import PostgresQueue

        return PostgresQueue(config.server.queue)
    if config.server.redis:
        from podium.queue.redis import RedisQueue

        return RedisQueue(config.server.redis, prefix=config.server.prefix)
    return LocalQueue()


def build_gateway(
    config: Config,
    agents: Sequence[ServedAgent] | None = None,
    keys: KeyRing | None = None,
    *,
    store: RunStore | None = None,
) -> Gateway:
    """Everything ``podium serve`` runs, wired; start it with the app's lifespan."""
    served = list(agents) if agents is not None else load_agents(config)
    store = store or open_store(config)
    queue = open_queue(config)
    keys = keys or KeyRing(config.keys)
    if config.server.redis:
        from podium.streaming.redis import RedisTokenChannel

        client = getattr(store, "client", None) or config.server.redis
        tokens = RedisTokenChannel(client, prefix=config.server.prefix)
        return Gateway(config, served, store, queue, keys, tokens=tokens)
    if distributed(config):  # on PostgreSQL: streams carry whole journal events
        return Gateway(config, served, store, queue, keys)
    engine = Engine(store, profile=config.server.profile)
    by_name = {s.name: s.agent for s in served}
    pools = dict.fromkeys([*config.pool_names(), *(s.pool for s in served)])
    for pool in dict.fromkeys(s.pool for s in served):  # embedded: the only workers are ours
        if config.pool(pool).workers < 1:
            # Allowed (a gateway that takes runs now and runs them after a restart with
            # workers: they wait in the store), but never silently.
            names = ", ".join(repr(s.name) for s in served if s.pool == pool)
            log.warning(
                "pools.%s.workers = 0: in embedded mode (no server.redis) nothing runs the "
                "runs of %s; they stay queued until the server starts with workers", pool, names
            )
    workers = [
        Worker(
            queue,
            engine,
            by_name,
            pool=pool,
            concurrency=config.pool(pool).concurrency,
            consumer=f"gateway-{pool}-{i}",
        )
        for pool in pools
        for i in range(config.pool(pool).workers)
    ]
    return Gateway(config, served, store, queue, keys, engine=engine, workers=workers)
