"""``podium.toml``: the settings of ``podium serve`` and ``podium worker``, typed.

Every setting can also come from the environment, which wins over the file:
``PODIUM_<SECTION>__<FIELD>`` (double underscore between levels, any case),
for example ``PODIUM_SERVER__PORT=9000``, ``PODIUM_LIMITS__TENANT_RATE=50``,
``PODIUM_POOLS__DEFAULT__WORKERS=2`` (pool names are read in lower case).
Two lists have a compact form:
``PODIUM_AGENTS="react=pkg.mod:agent,other=pkg.other:make"`` and
``PODIUM_KEYS="sha256:<hex>=tenant-a,pk_plain_key=tenant-b"`` (``=ops:admin`` marks an
operator's key, which may read ``/metrics``).

Example::

    [server]
    host = "127.0.0.1"
    port = 8000
    store = "sqlite:podium.sqlite"      # or "memory"

    [[agents]]
    name = "support"
    path = "myapp.agents:support"
    pool = "default"

    [pools.default]
    workers = 1            # in-process workers (embedded mode)
    concurrency = 256      # runs each worker drives at once
    rate = 100.0           # admitted runs/s (token bucket), 0 = unlimited
    burst = 200
    latency_target_s = 30.0

    [limits]
    tenant_rate = 50.0
    tenant_burst = 100

    [[keys]]
    hash = "sha256:9f86d0…"   # `podium serve --hash-key SECRET` prints it
    tenant = "acme"
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from podium.errors import ConfigError

__all__ = (
    "AdaptiveConfig",
    "AgentConfig",
    "Config",
    "KeyConfig",
    "LimitsConfig",
    "MCPServerConfig",
    "ModelConfig",
    "PoolConfig",
    "RouteConfig",
    "ServerConfig",
    "load_config",
)

_ENV_PREFIX = "PODIUM_"
#: What ``podium serve --hash-key`` prints. Anything else (a copied placeholder such as
#: ``sha256:...``, a truncated digest) can never match a key: refused, not a silent 401.
_KEY_HASH = re.compile(r"sha256:[0-9a-fA-F]{64}")

Positive = Annotated[float, msgspec.Meta(gt=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Where and how the gateway listens, and which store and queue it uses.

    ``store``: ``"sqlite:PATH"`` (the embedded default), ``"memory"``.
    ``redis``: a ``redis://`` URL switches to the distributed mode (Redis store
    and queue, workers in separate ``podium worker`` processes). ``prefix``
    namespaces every Redis key and ``ttl_s`` expires finished runs (0: never);
    the gateway and its workers must agree on both, which is why
    ``podium worker --config`` reads them from the same file.
    """

    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8000
    store: str = "sqlite:podium.sqlite"
    redis: str | None = None
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1)] = 1 << 20
    wait_timeout_s: Positive = 300.0
    drain_grace_s: NonNegative = 30.0
    docs: bool = True
    # Slow and hostile clients (enforced per connection, before the app sees a request).
    header_timeout_s: Positive = 10.0
    body_timeout_s: Positive = 30.0
    keep_alive_s: Positive = 5.0
    max_header_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 16384
    max_headers: Annotated[int, msgspec.Meta(ge=8)] = 100
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = 10000
    prefix: str = "podium"
    ttl_s: NonNegative = 7 * 86_400.0


class AgentConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An agent to serve, from Python or declared here.

    From Python: ``path`` is ``package.module:attribute`` (an Agent or a
    function returning one) or a built-in example name; ``model`` (a
    ``[[models]]`` name) replaces its model. Declared: no ``path``, a ``name``,
    a ``model``, ``instructions``, ``tools`` (import paths of ``@tool``
    functions, or ``SERVER:*`` / ``SERVER:TOOL`` for an ``[[mcp_servers]]``
    entry's tools), ``mcp`` (names of ``[[mcp_servers]]`` whose tools it all
    takes), ``output_type`` (the import path of the answer's type: a msgspec Struct, a
    dataclass or a TypedDict), ``subagents`` (names of other ``[[agents]]`` it may call
    as tools, each call a child run), ``handoffs`` (names of agents it may hand the
    conversation to) and limits.
    """

    path: str | None = None
    name: str | None = None
    pool: str = "default"
    model: str | None = None
    instructions: str = ""
    description: str = ""
    tools: list[str] = msgspec.field(default_factory=list)
    mcp: list[str] = msgspec.field(default_factory=list)
    max_steps: Annotated[int, msgspec.Meta(ge=1)] = 12
    deadline_s: Positive | None = None
    max_context_tokens: Annotated[int, msgspec.Meta(ge=1)] = 32_000
    max_tool_result_tokens: Annotated[int, msgspec.Meta(ge=1)] = 2_000
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    output_type: str | None = None
    output_mode: Literal["auto", "native", "tool"] = "auto"
    output_retries: Annotated[int, msgspec.Meta(ge=0)] = 2
    subagents: list[str] = msgspec.field(default_factory=list)
    handoffs: list[str] = msgspec.field(default_factory=list)
    max_parallel_children: Annotated[int, msgspec.Meta(ge=1)] = 4


class MCPServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An MCP server whose tools declared agents may list (``mcp = [NAME]`` or
    ``tools = ["NAME:*"]``, ``"NAME:TOOL"``).

    ``transport = "stdio"``: started as ``command`` + ``args`` (with ``env`` added to a
    clean environment, in ``cwd``); ``"http"``: a streamable-HTTP endpoint at ``url``,
    sent ``headers``, every connection checked by an egress policy: public addresses
    only unless ``allow_private`` (loopback, private and link-local networks; never cloud
    metadata) or ``allow_networks`` (``["10.1.0.0/16"]``) say otherwise. ``timeout``
    (seconds) and ``retries`` are each tool's policy; ``prefix`` goes before each tool's
    name.
    """

    name: str
    transport: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout: Positive = 30.0
    retries: Annotated[int, msgspec.Meta(ge=0)] = 1
    prefix: str = ""
    allow_private: bool = False
    allow_networks: list[str] = msgspec.field(default_factory=list)


class RouteConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A condition sending calls to the endpoint's group (all given must hold)."""

    max_prompt_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_prompt_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    agents: list[str] = msgspec.field(default_factory=list)


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One OpenAI-compatible endpoint. Entries with the same ``name`` form one pool.

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` (else OpenAI's); the API key
    is read from the environment variable ``api_key_env`` (default
    ``OPENAI_API_KEY``), never written in the file. ``capacity`` is the
    sequences the server decodes at once; ``group`` and ``routing`` place the
    endpoint in hybrid routing (``tags``: agents with any of these tags are
    routed to this group); ``health_path`` is probed for readiness
    (default ``/health``, then ``/v1/models``). ``structured_output`` is how agents
    with an ``output_type`` ask this server: ``"native"`` (``response_format``) or
    ``"tool"`` (a final-answer tool, for servers without ``response_format``).
    ``provider`` is the ``gen_ai.provider.name`` of its traces (default ``"openai"``).
    """

    name: str
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    capacity: Annotated[int, msgspec.Meta(ge=1)] = 64
    group: str = "default"
    tags: list[str] = msgspec.field(default_factory=list)
    routing: list[RouteConfig] = msgspec.field(default_factory=list)
    health_path: str | None = None
    stream: bool = False
    timeout_s: Positive | None = None
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)
    structured_output: Literal["native", "tool"] = "native"
    provider: str = "openai"


class PoolConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A resource pool: its workers and its admission limits.

    ``rate``/``burst``: token bucket of admitted runs per second (0: unlimited).
    ``latency_target_s``: a new run is refused when the backlog ahead of it
    would take longer than this to finish. ``expected_run_s`` seeds the run
    duration estimate until runs have been measured. ``max_queue`` caps the
    backlog outright.
    """

    workers: Annotated[int, msgspec.Meta(ge=0)] = 1
    concurrency: Annotated[int, msgspec.Meta(ge=1)] = 256
    rate: NonNegative = 0.0
    burst: NonNegative = 0.0
    latency_target_s: Positive = 30.0
    expected_run_s: Positive = 1.0
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 10_000


class AdaptiveConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The AIMD limiter on the admitted rate, driven by CPU load and event-loop lag.

    Every ``interval_s`` it samples the serving process's CPU utilization (1.0
    = one core busy), its event loop thread's CPU demand (the share of the interval
    that thread ran or waited to run: 1.0 when the loop is saturated, even on a
    shared machine or under a CPU quota that gives it part of a core; Linux) and the
    loop lag p99. When the larger CPU figure is above ``cpu_threshold``, or the lag
    above ``lag_threshold_ms``, the limit is multiplied by ``decrease``; below both
    it grows by ``increase`` × ``max_rate`` per interval, up to ``max_rate``.
    """

    enabled: bool = True
    cpu_threshold: Annotated[float, msgspec.Meta(gt=0)] = 0.85
    lag_threshold_ms: Positive = 100.0
    interval_s: Positive = 1.0
    max_rate: Positive = 10_000.0
    min_rate: Positive = 1.0
    decrease: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.7
    increase: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.05


class LimitsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Per-tenant token bucket (0: unlimited) and the adaptive limiter."""

    tenant_rate: NonNegative = 0.0
    tenant_burst: NonNegative = 0.0
    adaptive: AdaptiveConfig = msgspec.field(default_factory=AdaptiveConfig)


class EgressConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A tenant's egress limits (``[keys.egress]``). Each field narrows the egress policy of
    the tools its runs call; one left out leaves theirs as it is on that point.

    - ``allow_hosts``: the only hosts its runs may reach (``"*.example.com"`` for
      subdomains); empty: any host the tool's policy allows;
    - ``allow_ports`` / ``deny_ports``: ports (unset: any the tool's policy allows);
    - ``allow_private = false``: no loopback, private or link-local address even where a
      tool's policy allows one, except in ``allow_networks``;
    - ``max_response_bytes``, ``timeout_s``, ``max_redirects``: lower caps.
    """

    allow_hosts: list[str] = msgspec.field(default_factory=list)
    allow_ports: list[Annotated[int, msgspec.Meta(ge=1, le=65535)]] | None = None
    deny_ports: list[int] = msgspec.field(default_factory=list)
    allow_private: bool = True
    allow_networks: list[str] = msgspec.field(default_factory=list)
    max_response_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    max_redirects: Annotated[int, msgspec.Meta(ge=0)] | None = None


class KeyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An API key for a tenant: ``hash`` is ``sha256:<hex>``; ``key`` (plain) is for development."""

    tenant: str
    hash: str | None = None
    key: str | None = None
    rate: NonNegative | None = None
    burst: NonNegative | None = None
    admin: bool = False  # an operator's key: may read /metrics (tenants' keys may not)
    #: The tools this tenant's runs may call (None: all of each agent's tools).
    tools: list[str] | None = None
    #: Where this tenant's runs' tools may connect: narrows each tool's own egress policy.
    egress: EgressConfig | None = None


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    agents: list[AgentConfig] = msgspec.field(default_factory=list)
    pools: dict[str, PoolConfig] = msgspec.field(default_factory=dict)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    keys: list[KeyConfig] = msgspec.field(default_factory=list)
    models: list[ModelConfig] = msgspec.field(default_factory=list)
    mcp_servers: list[MCPServerConfig] = msgspec.field(default_factory=list)

    def pool(self, name: str) -> PoolConfig:
        """The pool's settings (defaults for a pool the file does not name)."""
        return self.pools.get(name) or PoolConfig()

    def pool_names(self) -> list[str]:
        names = dict.fromkeys(self.pools)
        names.update(dict.fromkeys(a.pool for a in self.agents))
        return list(names) or ["default"]


def _parse_scalar(text: str) -> Any:
    """An env value as TOML would read it (numbers, booleans), else the string itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _parse_pairs(text: str, what: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        left, sep, right = item.rpartition("=")
        if not sep or not left or not right:
            raise ConfigError(
                f"{what}: expected LEFT=RIGHT items separated by commas, got {item!r}"
            )
        pairs.append((left, right))
    return pairs


def _key_from_env(key: str, tenant: str) -> dict[str, Any]:
    """One ``KEY=TENANT`` item of ``PODIUM_KEYS``; ``TENANT:admin`` marks an operator's key."""
    name, _, role = tenant.partition(":")
    if role not in ("", "admin"):
        raise ConfigError(f"PODIUM_KEYS: unknown role {role!r} for tenant {name!r} (only 'admin')")
    entry: dict[str, Any] = {"hash" if key.startswith("sha256:") else "key": key, "tenant": name}
    if role:
        entry["admin"] = True
    return entry


def apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Merge ``PODIUM_*`` variables into the raw settings (they win over the file)."""
    for name, value in environ.items():
        upper = name.upper()
        if not upper.startswith(_ENV_PREFIX):
            continue
        path = [p.lower() for p in upper[len(_ENV_PREFIX) :].split("__")]
        if path == ["agents"]:
            data["agents"] = [{"name": n, "path": p} for n, p in _parse_pairs(value, name)]
        elif path == ["keys"]:
            data["keys"] = [_key_from_env(k, t) for k, t in _parse_pairs(value, name)]
        elif path[0] in {"server", "limits", "pools"} and len(path) >= 2:
            node = data
            for key in path[:-1]:
                child = node.get(key)
                if not isinstance(child, dict):
                    child = node[key] = {}
                node = child
            node[path[-1]] = _parse_scalar(value)
    return data


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (TOML; optional), apply ``PODIUM_*`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
    data = apply_env(data, os.environ if environ is None else environ)
    try:
        config = msgspec.convert(data, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"config: {exc}") from exc
    models = {m.name for m in config.models}
    for agent in config.agents:
        if agent.path is None and (agent.name is None or agent.model is None):
            raise ConfigError(
                "agents: an agent without 'path' is declared here and needs 'name' and 'model'"
            )
        if agent.model is not None and agent.model not in models:
            known = ", ".join(sorted(models)) or "none"
            raise ConfigError(
                f"agents: {agent.name or agent.path!r} uses model {agent.model!r}, "
                f"which no [[models]] entry names (known: {known})"
            )
    _check_mcp(config)
    _check_links(config)
    for key in config.keys:
        if (key.hash is None) == (key.key is None):
            raise ConfigError(f"keys: tenant {key.tenant!r} needs exactly one of hash or key")
        if key.hash is not None and not _KEY_HASH.fullmatch(key.hash):
            raise ConfigError(
                f"keys: tenant {key.tenant!r}: hash must be sha256: and 64 hex digits "
                f"(podium serve --hash-key KEY prints it), got {key.hash!r}"
            )
        for net in key.egress.allow_networks if key.egress is not None else ():
            try:
                ipaddress.ip_network(net)
            except ValueError as exc:
                raise ConfigError(f"keys: tenant {key.tenant!r}: egress: {exc}") from exc
    return config


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
