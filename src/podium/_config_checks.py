"""What ``podium.toml`` must hold beyond each field's type: values that depend on one
another (a model an agent names, a cycle of sub-agents), and strings of a given form
(a store, a Redis URL, a key hash). Each failure is one :class:`ConfigError` line naming
the setting, raised while the file is read, not when a server first needs the value.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from podium.errors import ConfigError

if TYPE_CHECKING:
    from podium.config_schema import Config

__all__ = ("check_archive", "check_config", "check_queue", "check_redis_url", "check_store")

_SHA256 = re.compile(r"sha256:[0-9a-fA-F]{64}")


def check_config(config: Config) -> None:
    """Every cross-field rule of the settings, in the order a reader meets them."""
    _check_server(config)
    _check_pools(config)
    _check_models(config)
    _check_agents(config)
    _check_mcp(config)
    _check_links(config)
    _check_imported(config)
    _check_keys(config)
    adaptive = config.limits.adaptive
    if adaptive.min_rate > adaptive.max_rate:
        raise ConfigError(
            f"limits.adaptive: min_rate ({adaptive.min_rate:g}) is above max_rate "
            f"({adaptive.max_rate:g})"
        )


def check_store(spec: str, what: str = "server.store") -> None:
    """``"memory"``, ``"sqlite:PATH"`` or a ``postgresql://`` URL: anything else is refused
    by its name."""
    from podium.store.postgres_errors import check_postgres_url, is_postgres_url, redact

    if is_postgres_url(spec):
        try:
            check_postgres_url(spec)
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from None
        return
    kind, sep, path = spec.partition(":")
    if spec != "memory" and not (kind == "sqlite" and sep and path):
        raise ConfigError(
            f"{what}: use 'sqlite:PATH', 'memory' or a postgresql:// URL, got {redact(spec)!r}"
        )


def check_redis_url(url: str) -> None:
    """Refuse, at once, a Redis URL that Podium cannot use (TLS, unix sockets, typos)."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # parses it: "host:port6379" is caught here
    except ValueError as exc:
        raise ConfigError(f"Redis URL {url!r} is malformed: {exc}") from None
    if parts.scheme in ("rediss", "unix"):
        raise ConfigError(
            f"Redis URL {url!r}: {'TLS' if parts.scheme == 'rediss' else 'unix sockets'} "
            "not supported yet; use a redis:// TCP URL (redis://HOST:PORT/DB)"
        )
    if parts.scheme != "redis" or not parts.hostname:
        raise ConfigError(f"Redis URL {url!r} is malformed; use redis://HOST:PORT/DB")
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise ConfigError(f"Redis URL {url!r}: the database must be a number, got {db!r}")


def _check_server(config: Config) -> None:
    server = config.server
    check_store(server.store)
    if not server.keep_alive_s.is_integer():  # uvicorn's keep-alive is whole seconds
        raise ConfigError(
            f"server.keep_alive_s: whole seconds, at least 1, got {server.keep_alive_s:g}"
        )
    if server.redis is not None:
        try:
            check_redis_url(server.redis)
        except ConfigError as exc:
            raise ConfigError(f"server.redis: {exc}") from None
    if server.archive is not None:
        check_archive(server.archive, server.redis, server.store)
    if server.queue is not None:
        check_queue(server.queue, server.store, redis=server.redis)


def check_archive(url: str, redis: str | None, store: str, what: str = "server.archive") -> None:
    """An archive is a PostgreSQL URL beside a Redis store: anything else is refused."""
    from podium.store.postgres_errors import check_postgres_url, is_postgres_url, redact

    if not is_postgres_url(url):
        raise ConfigError(f"{what}: a postgresql:// URL, got {redact(url)!r}")
    try:
        check_postgres_url(url)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if redis is None or is_postgres_url(store):
        raise ConfigError(
            f"{what}: archives a Redis store's finished runs; it needs server.redis (and "
            "no postgresql:// server.store, which keeps every run in PostgreSQL already)")


def check_queue(queue: str, store: str, *, redis: str | None, what: str = "server.queue") -> None:
    """A queue on PostgreSQL: a ``postgresql://`` URL, beside a PostgreSQL store and no
    Redis (a Redis deployment queues in Redis)."""
    from podium.store.postgres_errors import check_postgres_url, is_postgres_url, redact

    if not is_postgres_url(queue):
        raise ConfigError(f"{what}: a postgresql:// URL (a Redis queue is server.redis), "
                          f"got {redact(queue)!r}")
    try:
        check_postgres_url(queue)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if redis is not None:
        raise ConfigError(f"{what}: a queue on PostgreSQL is for deployments without Redis; "
                          "with server.redis the queue is Redis's (leave one out)")
    if not is_postgres_url(store):
        raise ConfigError(f"{what}: a queue on PostgreSQL keeps its runs in PostgreSQL too: "
                          f"set server.store to a postgresql:// URL (got {redact(store)!r})")


def _check_pools(config: Config) -> None:
    """A pool's name is what agents and ``podium worker --pool`` say: an empty one (``[pools.""]``)
    could never be named, like every other empty string in the file."""
    for name in config.pools:
        if not name.strip():
            raise ConfigError(f'[pools."{name}"]: a pool\'s name must not be empty')


def _check_agents(config: Config) -> None:
    models = {m.name for m in config.models}
    for agent in config.agents:
        if agent.path is None and (agent.name is None or agent.model is None):
            raise ConfigError(
                "agents: an agent without 'path' is declared here and needs 'name' and 'model'"
            )
        guard = agent.screening.guard_model if agent.screening is not None else None
        if guard is not None and guard not in models:
            raise ConfigError(
                f"agents: {agent.name or agent.path!r}: screening.guard_model {guard!r} is no "
                f"[[models]] name (known: {', '.join(sorted(models)) or 'none'})"
            )
        if agent.model is not None and agent.model not in models:
            known = ", ".join(sorted(models)) or "none"
            raise ConfigError(
                f"agents: {agent.name or agent.path!r} uses model {agent.model!r}, "
                f"which no [[models]] entry names (known: {known})"
            )


def _check_models(config: Config) -> None:
    for model in config.models:
        url = model.base_url
        if url is not None and not (
            urlsplit(url).scheme in ("http", "https") and urlsplit(url).hostname
        ):
            raise ConfigError(
                f"models: {model.name!r}: base_url must be an http:// or https:// URL "
                f"(the API root, usually ending in /v1), got {url!r}"
            )


def _check_keys(config: Config) -> None:
    tenants: dict[str, str] = {}  # the key's sha256 -> its tenant
    for key in config.keys:
        if (key.hash is None) == (key.key is None):
            raise ConfigError(f"keys: tenant {key.tenant!r} needs exactly one of hash or key")
        if key.hash is not None and not _SHA256.fullmatch(key.hash):
            raise ConfigError(
                f"keys: tenant {key.tenant!r}: hash must look like sha256:<64 hex digits> "
                "(podium serve --hash-key KEY prints it)"
            )
        if key.egress is not None:  # (its networks parse, its private_ports open something)
            from podium.security.tenant_egress import policy_from_config

            policy_from_config(key.egress, key.tenant)
        # The same key twice: the gateway would keep the last, and the first tenant's
        # clients would be served (and billed) as the second one, without a word.
        digest = (key.hash or "sha256:" + hashlib.sha256((key.key or "").encode()).hexdigest())
        other = tenants.get(digest.lower())
        if other is not None:
            raise ConfigError(
                f"keys: the same key is given twice (tenants {other!r} and {key.tenant!r}); "
                "each key belongs to one tenant, once"
            )
        tenants[digest.lower()] = key.tenant


def _check_mcp(config: Config) -> None:
    """``[[mcp_servers]]`` entries complete, and every agent's MCP names known."""
    names = [s.name for s in config.mcp_servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"mcp_servers: two servers are named {', '.join(map(repr, dupes))}")
    for server in config.mcp_servers:
        if server.transport == "stdio" and not server.command:
            raise ConfigError(f"mcp_servers: {server.name!r} (stdio) needs a 'command'")
        if server.transport == "http" and not server.url:
            raise ConfigError(f"mcp_servers: {server.name!r} (http) needs a 'url'")
        for net in server.allow_networks:
            try:
                ipaddress.ip_network(net)
            except ValueError as exc:
                raise ConfigError(f"mcp_servers: {server.name!r}: {exc}") from exc
    known = ", ".join(sorted(names)) or "none"
    for agent in config.agents:
        label = agent.name or agent.path
        if agent.path is not None and (agent.mcp or any(_mcp_ref(t, names) for t in agent.tools)):
            raise ConfigError(
                f"agents: {label!r} is imported from {agent.path!r}; only a declared agent "
                "(no 'path') takes tools from the file"
            )
        if agent.path is not None and agent.output_type is not None:
            raise ConfigError(
                f"agents: {label!r} is imported from {agent.path!r}; set its output_type in "
                "Python (only a declared agent takes output_type from the file)"
            )
        for name in agent.mcp:
            if name not in names:
                raise ConfigError(
                    f"agents: {label!r} uses MCP server {name!r}, which no [[mcp_servers]] "
                    f"entry names (known: {known})"
                )


#: What only an agent declared in the file takes (an imported one has its own, in Python);
#: tools, mcp, output_type, sub-agents and hand-offs are refused with their own reasons.
_DECLARED_ONLY = (
    "instructions", "description", "max_steps", "deadline_s", "max_context_tokens",
    "max_tool_result_tokens", "max_tokens", "temperature", "tags", "output_mode",
    "output_retries", "max_parallel_children", "tools", "screening", "secret_env",
)


def _check_imported(config: Config) -> None:
    """An agent imported from Python (``path``) takes its name, pool and model from the
    file, nothing else: a limit set here would be ignored, so it is refused."""
    import msgspec

    from podium.config_schema import AgentConfig

    defaults = {f.name: f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                for f in msgspec.structs.fields(AgentConfig)}
    for agent in config.agents:
        if agent.path is None:
            continue
        given = [name for name in _DECLARED_ONLY if getattr(agent, name) != defaults[name]]
        if given:
            raise ConfigError(
                f"agents: {agent.name or agent.path!r} is imported from {agent.path!r}, which "
                f"sets its own {', '.join(given)}: set {'it' if len(given) == 1 else 'them'} "
                "in Python, or declare the agent here (no 'path'); only name, pool and model "
                "apply to an imported agent"
            )


def _check_links(config: Config) -> None:
    """Every agent's ``subagents`` and ``handoffs`` name another declared agent; sub-agents
    call no cycle (an agent cannot end up calling itself; hand-offs may go back and forth)."""
    cfgs = {a.name: a for a in config.agents if a.name is not None}
    known = ", ".join(sorted(cfgs)) or "none"
    for agent in config.agents:
        label = agent.name or agent.path
        if agent.path is not None and (agent.subagents or agent.handoffs):
            raise ConfigError(
                f"agents: {label!r} is imported from {agent.path!r}; give it sub-agents and "
                "hand-offs in Python (agent.as_tool(), handoffs=[...]), or declare it here"
            )
        for kind, names in (("sub-agent", agent.subagents), ("hand-off", agent.handoffs)):
            for name in names:
                if name not in cfgs:
                    raise ConfigError(
                        f"agents: {label!r} names {kind} {name!r}, which no [[agents]] entry "
                        f"names (known: {known}); declare it too, so every process serving "
                        f"{label!r} builds the same {name!r}"
                    )
                if name == agent.name:
                    raise ConfigError(f"agents: {label!r} names itself as a {kind}")

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            cycle = " -> ".join((*path[path.index(name):], name))
            raise ConfigError(f"agents: sub-agents call each other in a cycle: {cycle}")
        for sub in cfgs[name].subagents:
            visit(sub, (*path, name))

    for name in cfgs:
        visit(name, ())


def _mcp_ref(spec: str, servers: list[str]) -> bool:
    """``SERVER:*`` or ``SERVER:TOOL`` naming an ``[[mcp_servers]]`` entry (not an import path)."""
    left, sep, _ = spec.partition(":")
    return bool(sep) and left in servers
