"""The typed shape of ``podium.toml`` (see :mod:`podium.config` for how it is read): the
structs alone, so that the cross-field checks (:mod:`podium._config_checks`) can import
them without importing the loader that runs those checks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = (
    "AdaptiveConfig",
    "AgentConfig",
    "Config",
    "EgressConfig",
    "KeyConfig",
    "LimitsConfig",
    "MCPServerConfig",
    "ModelConfig",
    "PoolConfig",
    "RouteConfig",
    "ScreeningConfig",
    "ServerConfig",
)

_INT64_MAX = 2**63 - 1

Positive = Annotated[float, msgspec.Meta(gt=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
#: A name, a path or a URL: an empty one is a mistake, never a way to say "the default"
#: (leave the key out for that). An empty ``host`` bound every interface.
Text = Annotated[str, msgspec.Meta(min_length=1)]


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Where and how the gateway listens, and which store and queue it uses.

    ``store``: ``"sqlite:PATH"`` (the embedded default), ``"memory"``, or a
    ``"postgresql://…"`` URL (embedded, or beside ``redis``: runs kept in PostgreSQL,
    queued in Redis).
    ``redis``: a ``redis://`` URL switches to the distributed mode (Redis store
    and queue, workers in separate ``podium worker`` processes). ``queue``: a
    ``postgresql://`` URL switches to the distributed mode on PostgreSQL alone (its
    queue there, ``store`` a ``postgresql://`` URL too; no Redis). ``prefix``
    namespaces every Redis key and ``ttl_s`` expires finished runs (0: never);
    the gateway and its workers must agree on both, which is why
    ``podium worker --config`` reads them from the same file.
    ``archive``: a ``postgresql://`` URL beside ``redis``: finished runs are copied there
    before their Redis TTL ends, and every reader finds them there after it (see
    :mod:`podium.store.tiered`).
    """

    host: Text = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8000
    store: Text = "sqlite:podium.sqlite"
    redis: Text | None = None
    archive: Text | None = None
    queue: Text | None = None
    # Every route's body, enforced as it arrives (a lying Content-Length included); up to
    # 1 GiB: past that a limit is no limit, and a typo of a few zeros.
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1, le=1 << 30)] = 1 << 20
    wait_timeout_s: Positive = 300.0
    drain_grace_s: NonNegative = 30.0
    docs: bool = True
    # Slow and hostile clients (enforced per connection, before the app sees a request).
    header_timeout_s: Positive = 10.0
    body_timeout_s: Positive = 30.0
    write_timeout_s: Positive = 60.0
    # Whole seconds (5 or 5.0), at least 1: uvicorn takes an int, and 0.5 was silently
    # rounded up to 1; a fraction is refused by check_config.
    keep_alive_s: Annotated[float, msgspec.Meta(ge=1)] = 5.0
    max_header_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 16384
    max_headers: Annotated[int, msgspec.Meta(ge=8)] = 100
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = 10000
    prefix: Text = "podium"
    ttl_s: NonNegative = 7 * 86_400.0
    # An evicting maxmemory-policy deletes runs under memory pressure: refused at start and
    # reported not ready, unless the operator accepts that here.
    allow_evicting_redis: bool = False
    # The workload profile of every run (per-phase wall and CPU time, a few µs a step);
    # false: Engine(profile=False) in the gateway and its workers, the floor.
    profile: bool = True


class ScreeningConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A declared agent's screening (``[agents.screening]``; see docs/security.md): the
    first pass's ``action`` at ``threshold``; ``outputs`` turns on the output guard
    (links and images only to ``output_hosts``, secrets, tainted calls); ``guard_model``
    (a ``[[models]]`` name) is the classifier asked where the first pass is unsure
    (``guard_when = "always"``: about every text), within ``guard_budget_s``, failing
    ``open`` or ``closed``."""

    action: Literal["flag", "redact", "block"] = "flag"
    on_block: Literal["continue", "fail"] = "continue"
    threshold: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    outputs: bool = False
    output_hosts: list[str] = msgspec.field(default_factory=list)
    guard_model: Text | None = None
    guard_when: Literal["unsure", "always"] = "unsure"
    guard_budget_s: Positive = 1.0
    guard_on_failure: Literal["open", "closed"] = "open"


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

    path: Text | None = None
    name: Text | None = None
    pool: Text = "default"
    model: Text | None = None
    instructions: Text = ""
    description: str = ""
    tools: list[str] = msgspec.field(default_factory=list)
    mcp: list[str] = msgspec.field(default_factory=list)
    max_steps: Annotated[int, msgspec.Meta(ge=1)] = 12
    # podium.agent.DEFAULT_DEADLINE_S, as a Python agent's (importing podium.agent here would
    # load the engine with the config); 0: no deadline (the file takes finite numbers only).
    deadline_s: NonNegative = 600.0
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
    screening: ScreeningConfig | None = None
    # Names of environment variables whose values are the agent's secrets (never written
    # down in clear: see podium.security.redact); the values are read at start.
    secret_env: list[str] = msgspec.field(default_factory=list)


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

    name: Text
    transport: Literal["stdio", "http"] = "stdio"
    command: Text | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: Text | None = None
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
    sequences the server decodes at once, across all of a host's worker processes
    (``podium worker --procs N`` gives each its share: :mod:`podium.worker.capacity`);
    ``group`` and ``routing`` place the
    endpoint in hybrid routing (``tags``: agents with any of these tags are
    routed to this group); ``health_path`` is probed for readiness (default: the
    ``kind``'s, see :mod:`podium.models.server_kinds`). ``structured_output`` is how agents
    with an ``output_type`` ask this server: ``"native"`` (``response_format``) or
    ``"tool"`` (a final-answer tool, for servers without ``response_format``).
    ``provider`` is the ``gen_ai.provider.name`` of its traces (default ``"openai"``).
    """

    name: Text
    model: Text
    base_url: Text | None = None
    api_key_env: Text = "OPENAI_API_KEY"
    capacity: Annotated[int, msgspec.Meta(ge=1)] = 64
    group: Text = "default"
    tags: list[str] = msgspec.field(default_factory=list)
    routing: list[RouteConfig] = msgspec.field(default_factory=list)
    health_path: str | None = None
    stream: bool = False
    timeout_s: Positive | None = None
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)
    structured_output: Literal["native", "tool"] = "native"
    provider: str = "openai"
    # What the server is (its probe, structured-output form and tool_choice forms; see
    # podium.models.server_kinds) and the request fields sent when an agent sets none.
    kind: Literal[
        "vllm", "sglang", "llamacpp", "llama-cpp-python", "ollama", "tgi", "openai"
    ] | None = None
    response_format: Literal["json_schema", "json_object", "none"] | None = None
    tool_choice: Text | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    # Progress bounds of one call, and the probe.
    first_token_timeout_s: Positive | None = None
    idle_timeout_s: Positive = 120.0
    health_check: bool = True
    # The pool's (one per name: every entry of a name must agree on these).
    health_interval_s: Positive = 5.0
    health_timeout_s: Positive = 2.0
    unhealthy_after: Annotated[int, msgspec.Meta(ge=1)] = 2
    healthy_after: Annotated[int, msgspec.Meta(ge=1)] = 1
    cooldown_s: Positive = 30.0
    healthy_wait_s: NonNegative = 30.0


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
    max_queue: Annotated[int, msgspec.Meta(ge=1)] = 10_000  # 0 would refuse every run


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
    - ``private_ports``: the only ports a non-public address (loopback, private) may be
      reached on, where one is allowed at all (``allow_networks = ["127.0.0.1/32"]`` and
      ``private_ports = [8080]``: the tenant's tools reach a local service on 8080, no
      other loopback port); unset: any port ``allow_ports`` allows;
    - ``max_response_bytes``, ``timeout_s``, ``max_redirects``: lower caps.
    """

    allow_hosts: list[str] = msgspec.field(default_factory=list)
    allow_ports: list[Annotated[int, msgspec.Meta(ge=1, le=65535)]] | None = None
    deny_ports: list[int] = msgspec.field(default_factory=list)
    allow_private: bool = True
    allow_networks: list[str] = msgspec.field(default_factory=list)
    private_ports: list[Annotated[int, msgspec.Meta(ge=1, le=65535)]] | None = None
    max_response_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    max_redirects: Annotated[int, msgspec.Meta(ge=0)] | None = None


class KeyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An API key for a tenant: ``hash`` is ``sha256:<hex>``; ``key`` (plain) is for development."""

    tenant: Text
    hash: Text | None = None
    key: Text | None = None
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
