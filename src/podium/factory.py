"""From ``podium.toml`` to live objects: the ``[[models]]`` endpoints and the served agents.

The gateway, ``podium worker`` and ``podium run`` all go through here, so an
agent named in the file is the same agent, with the same model, in every
process that reads it.

Example::

    [[models]]
    name = "qwen"
    base_url = "http://gpu-0:8000/v1"
    model = "Qwen/Qwen2.5-7B-Instruct"
    capacity = 64

    [[agents]]
    name = "support"
    model = "qwen"
    instructions = "You answer questions about orders."
    tools = ["myapp.tools:get_order", "docs:search"]

    [[mcp_servers]]
    name = "docs"
    command = "python"
    args = ["docs_server.py"]

An agent's MCP tools are listed once, when the agents are built (a server that cannot be
started or listed is a :class:`ConfigError` then, not a failure of the first run).
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from podium.agent import Agent, ContextPolicy
from podium.config import AgentConfig, Config, MCPServerConfig, ModelConfig, ScreeningConfig
from podium.errors import ConfigError
from podium.models.base import Model, ModelSettings
from podium.tools.tool import Tool

if TYPE_CHECKING:
    from podium.models.openai import OpenAIChatModel
    from podium.security.screen import ScreeningPolicy
    from podium.tools.mcp import MCPServer

__all__ = (
    "BUILTIN_AGENTS",
    "MCPTools",
    "ServedSpec",
    "build_agent",
    "build_mcp_servers",
    "build_models",
    "builtin_agents",
    "load_tool",
    "model_from_option",
    "parse_agent_option",
    "resolve_agent",
    "served_agents",
    "with_model",
)

#: Built-in example agents, by the name the CLI accepts.
BUILTIN_AGENTS: dict[str, str] = {
    "react": "podium.examples.react:agent",
    "order-support": "podium.examples.order_support:agent",
    "research": "podium.examples.research:agent",
    "research-team": "podium.examples.research_team:agent",
    "refunds": "podium.examples.refunds:agent",
}

#: Where the OpenAI SDK sends requests when ``OPENAI_BASE_URL`` is unset; we do the same.
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"

log = logging.getLogger("podium.factory")


class ServedSpec(msgspec.Struct, frozen=True):
    """An agent as served: the name runs use, the agent, its resource pool."""

    name: str
    agent: Agent
    pool: str = "default"


def _dotted(file_path: str) -> str | None:
    """The module name of a ``.py`` file under the current directory (``./pk/wrong.py``:
    ``pk.wrong``), or None when it has none."""
    p = Path(file_path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(Path.cwd().resolve())
        except ValueError:  # outside the current directory: not importable from here
            return None
    if not p.name or p.suffix not in ("", ".py"):
        return None
    parts = [part for part in p.with_suffix("").parts if part != "."]
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def _import(path: str, what: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what} {path!r}: use package.module:attribute")
    if "/" in module_name or "\\" in module_name or (
        module_name.endswith(".py") and Path(module_name).is_file()
    ):
        # A file path, not a module: importlib would say "the 'package' argument is
        # required to perform a relative import", which names neither mistake nor fix.
        dotted = _dotted(module_name)
        hint = f": try {dotted}:{attr}" if dotted else ""
        raise ConfigError(
            f"{what} {path!r}: give a module path (package.module:attribute), not a file "
            f"path{hint}"
        )
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`, find the user's own modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {path!r}: cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed as it ran: say which, in one line
        raise ConfigError(
            f"{what} {path!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"{what} {path!r}: {module_name} has no attribute {attr!r}") from exc


def resolve_agent(spec: str) -> Agent:
    """``package.module:attribute`` (an Agent, or a function returning one) or a built-in name."""
    path = BUILTIN_AGENTS.get(spec, spec)
    if ":" not in path:
        names = ", ".join(sorted(BUILTIN_AGENTS))
        raise ConfigError(f"agent {spec!r}: use package.module:attribute or one of: {names}")
    target = _import(path, "agent")
    made = callable(target) and not isinstance(target, Agent)
    if made:
        try:
            target = target()
        except Exception as exc:  # a factory that fails (or wants arguments): one line
            raise ConfigError(
                f"agent {spec!r}: calling it raised {type(exc).__name__}: {exc}"
            ) from exc
        if inspect.iscoroutine(target):
            # Closed here, or Python warns "coroutine ... was never awaited" on the
            # terminal after the one line; and the fix is in the user's definition.
            target.close()
            raise ConfigError(
                f"agent {spec!r} is an async function: make it a plain function (def, not "
                "async def) returning an Agent"
            )
    if not isinstance(target, Agent):
        verb = "returned" if made else "is"
        raise ConfigError(f"agent {spec!r} {verb} a {type(target).__name__}, not an Agent")
    return target


def parse_agent_option(spec: str) -> AgentConfig:
    """``--agent [NAME=]MODULE:ATTR`` as an :class:`AgentConfig`."""
    name, sep, path = spec.partition("=")
    if sep and (not name or not path):
        raise ConfigError(f"--agent {spec!r}: use NAME=package.module:attribute")
    return AgentConfig(path=path, name=name) if sep else AgentConfig(path=spec)


def load_tool(path: str) -> Tool[Any, Any]:
    """A ``@tool`` by import path; a plain function is refused with the fix."""
    target = _import(path, "tool")
    if not isinstance(target, Tool):
        raise ConfigError(
            f"tool {path!r} is a {type(target).__name__}, not a tool: decorate it with @tool"
        )
    return target


def _api_key(env_name: str, environ: Mapping[str, str]) -> str | None:
    return environ.get(env_name) or None


def _endpoint(cfg: ModelConfig, environ: Mapping[str, str]) -> OpenAIChatModel:
    from podium.models.openai import OpenAIChatModel
    from podium.models.resilience import Timeouts

    base_url = cfg.base_url or environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_BASE_URL
    timeouts = Timeouts(
        total_s=Timeouts().total_s if cfg.timeout_s is None else cfg.timeout_s,
        token_idle_s=cfg.idle_timeout_s,
        first_token_s=cfg.first_token_timeout_s,
    )
    model = OpenAIChatModel(
        base_url,
        cfg.model,
        api_key=_api_key(cfg.api_key_env, environ),
        stream=cfg.stream,
        extra_body=cfg.extra_body,
        timeouts=timeouts,
        structured_output=cfg.structured_output,
        provider=cfg.provider,
        server=cfg.kind,
        response_format=cfg.response_format,
        tool_choice=cfg.tool_choice,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
    )
    if cfg.health_path is not None:
        import yarl

        root = model.base_url.removesuffix("/v1")
        path = cfg.health_path if cfg.health_path.startswith("/") else "/" + cfg.health_path
        # The client probes its list of health URLs in order; the file names the one to use.
        model._health_urls = [yarl.URL(root + path)]
    return model


def build_models(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, Model]:
    """One :class:`BackendPool` per ``[[models]]`` name, over that name's endpoints."""
    if not config.models:
        return {}
    from podium.models.pool import Backend, BackendPool
    from podium.models.pool_routing import RoutingRule

    env = os.environ if environ is None else environ
    by_name: dict[str, list[ModelConfig]] = {}
    for m in config.models:
        by_name.setdefault(m.name, []).append(m)
    models: dict[str, Model] = {}
    for name, entries in by_name.items():
        backends = [
            Backend(
                _endpoint(m, env),
                capacity=m.capacity,
                group=m.group,
                name=f"{name}#{i}" if len(entries) > 1 else name,
                health=None if m.health_check else _no_probe,
            )
            for i, m in enumerate(entries)
        ]
        rules: list[RoutingRule] = []
        for m in entries:
            if m.tags:
                rules.append(RoutingRule(m.group, tags=tuple(m.tags)))
            rules.extend(
                RoutingRule(
                    m.group,
                    max_prompt_tokens=r.max_prompt_tokens,
                    min_prompt_tokens=r.min_prompt_tokens,
                    tags=tuple(r.tags),
                    agents=tuple(r.agents),
                )
                for r in m.routing
            )
        routed = {r.group for r in rules}
        default = next((m.group for m in entries if m.group not in routed), entries[0].group)
        first = _pool_settings(name, entries)
        models[name] = BackendPool(
            backends,
            rules=rules,
            default_group=default,
            name=name,
            health_interval_s=first.health_interval_s,
            health_timeout_s=first.health_timeout_s,
            unhealthy_after=first.unhealthy_after,
            healthy_after=first.healthy_after,
            eject_s=first.cooldown_s,
            healthy_wait_s=first.healthy_wait_s,
        )
    return models


#: ``[[models]]`` keys that belong to the pool of a name, not to one endpoint of it.
POOL_KEYS = (
    "health_interval_s",
    "health_timeout_s",
    "unhealthy_after",
    "healthy_after",
    "cooldown_s",
    "healthy_wait_s",
)


def _pool_settings(name: str, entries: Sequence[ModelConfig]) -> ModelConfig:
    """The entry whose pool keys the pool takes: the first; the others must agree with
    it (two values for one pool would leave one of them silently unused)."""
    first = entries[0]
    for other in entries[1:]:
        for key in POOL_KEYS:
            if getattr(other, key) != getattr(first, key):
                raise ConfigError(
                    f"[[models]] {name!r}: {key} is the pool's, and its entries disagree"
                    f" ({getattr(first, key)!r} and {getattr(other, key)!r}): give every"
                    " entry of the name the same value"
                )
    return first


async def _no_probe(timeout_s: float) -> bool:
    """``health_check = false``: no probe; real calls tell a dead endpoint (it is drained
    when one fails because it went away)."""
    return True


def with_model(agent: Agent, model: Model) -> Agent:
    """The same agent on another model: every other setting kept as it is (the prompt
    prefix depends on instructions, tools and tokenizer only, so it is shared too)."""
    clone = copy.copy(agent)
    clone.model = model
    if clone.output_type is not None:  # the new model may be asked for it another way
        clone._bind_output()
    return clone


def build_mcp_servers(config: Config) -> dict[str, MCPServer]:
    """One :class:`~podium.tools.mcp.MCPServer` per ``[[mcp_servers]]`` entry (not started)."""
    if not config.mcp_servers:
        return {}
    from podium.security.egress import EgressDenied, EgressPolicy
    from podium.tools.mcp import MCPServer

    def make(cfg: MCPServerConfig) -> MCPServer:
        options: dict[str, Any] = {
            "name": cfg.name, "prefix": cfg.prefix, "timeout": cfg.timeout, "retries": cfg.retries
        }
        if cfg.transport == "http":
            assert cfg.url is not None  # load_config checked
            policy = EgressPolicy(
                allow_ports=None,
                allow_private=cfg.allow_private,
                allow_networks=tuple(cfg.allow_networks),
                label=f"MCP server {cfg.name!r}",
            )
            try:
                return MCPServer.http(cfg.url, headers=cfg.headers, policy=policy, **options)
            except EgressDenied as exc:
                raise ConfigError(f"mcp_servers: {cfg.name!r}: {exc}") from None
        assert cfg.command is not None
        return MCPServer.stdio(cfg.command, cfg.args, env=cfg.env or None, cwd=cfg.cwd, **options)

    return {cfg.name: make(cfg) for cfg in config.mcp_servers}


class MCPTools:
    """The ``[[mcp_servers]]`` of a config and their tools, each server listed once (on a
    loop of its own: the agents are built before, or inside, the caller's loop)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.servers = build_mcp_servers(config)
        self._listed: dict[str, list[Tool[..., Any]]] = {}

    def tools(self, server: str, agent: str) -> list[Tool[..., Any]]:
        if server not in self.servers:
            known = ", ".join(sorted(self.servers)) or "none"
            raise ConfigError(
                f"agents: {agent!r} uses MCP server {server!r}, which no [[mcp_servers]] "
                f"entry names (known: {known})"
            )
        if server not in self._listed:
            self._listed[server] = self._list(server)
        return self._listed[server]

    def server_of(self, t: Tool[..., Any]) -> str | None:
        """The server whose listing holds ``t`` (None: not one of theirs)."""
        for name, listed in self._listed.items():
            if any(t is x for x in listed):
                return name
        return None

    def _list(self, name: str) -> list[Tool[..., Any]]:
        server = self.servers[name]
        cfg = next(c for c in self.config.mcp_servers if c.name == name)
        parts = [cfg.url or ""] if cfg.transport == "http" else [cfg.command or "", *cfg.args]
        where = " ".join(parts)

        async def listed() -> list[Tool[..., Any]]:
            try:
                return await asyncio.wait_for(server.list_tools(), cfg.timeout)
            finally:
                await server.aclose()  # calls open their own session, on the run's loop

        out: list[list[Tool[..., Any]]] = []
        errors: list[BaseException] = []

        def target() -> None:
            try:
                out.append(asyncio.run(listed()))
            except BaseException as exc:  # reported below, in the caller's thread
                errors.append(exc)

        thread = threading.Thread(target=target, name=f"mcp-list:{name}", daemon=True)
        thread.start()
        thread.join()
        if errors:
            exc = errors[0]
            why = "no answer" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            raise ConfigError(
                f"mcp_servers: {name!r} ({cfg.transport}: {where.strip()}) could not be "
                f"started or listed: {why}"
            ) from exc
        return out[0]

    def select(self, spec: str, agent: str) -> list[Tool[..., Any]]:
        """``SERVER:*`` (all its tools) or ``SERVER:TOOL`` (by the server's tool name)."""
        server, _, wanted = spec.partition(":")
        tools = self.tools(server, agent)
        if wanted == "*":
            return tools
        prefix = self.servers[server].prefix
        found = [t for t in tools if t.name in (wanted, prefix + wanted)]
        if not found:
            names = ", ".join(sorted(t.name for t in tools)) or "none"
            raise ConfigError(
                f"agents: {agent!r} uses tool {wanted!r} of MCP server {server!r}, "
                f"which has no such tool (it has: {names})"
            )
        return found


def _agent_tools(cfg: AgentConfig, mcp: MCPTools | None) -> list[Tool[..., Any]]:
    label = cfg.name or cfg.path or "?"
    servers = {c.name for c in mcp.config.mcp_servers} if mcp is not None else set()
    tools: list[Tool[..., Any]] = []
    for spec in cfg.tools:
        if spec.partition(":")[0] in servers:
            assert mcp is not None
            tools.extend(mcp.select(spec, label))
        else:
            tools.append(load_tool(spec))
    for server in cfg.mcp:
        if mcp is None:
            raise ConfigError(f"agents: {label!r} uses MCP server {server!r}, but none is declared")
        tools.extend(mcp.tools(server, label))
    unique: dict[str, Tool[..., Any]] = {}
    for t in tools:  # "docs:*" and "docs:search" together: the tool once
        taken = unique.setdefault(t.name, t)
        if taken is not t:  # two tools, one name: the model could not say which it calls
            raise ConfigError(
                f"agents: {label!r} has two tools named {t.name!r} "
                f"({_origin(taken, mcp)} and {_origin(t, mcp)}); "
                "give an [[mcp_servers]] entry a prefix, or list one of them only"
            )
    return list(unique.values())


def _origin(t: Tool[..., Any], mcp: MCPTools | None) -> str:
    """Where an agent's tool came from, for a name clash's message."""
    server = mcp.server_of(t) if mcp is not None else None
    if server is not None:
        return f"MCP server {server!r}"
    return f"{getattr(t.fn, '__module__', '?')}.{getattr(t.fn, '__qualname__', t.name)}"


def build_agent(
    cfg: AgentConfig,
    models: Mapping[str, Model],
    mcp: MCPTools | None = None,
    subagents: Sequence[Agent] = (),
) -> Agent:
    """An agent from its ``[[agents]]`` entry (imported, or declared in the file);
    ``subagents`` are the built agents its ``subagents`` names (called as tools)."""
    model = models[cfg.model] if cfg.model is not None else None
    if cfg.path is not None:
        agent = resolve_agent(cfg.path)
        return with_model(agent, model) if model is not None else agent
    assert cfg.name is not None and model is not None  # load_config checked
    return Agent(
        cfg.name,
        model,
        cfg.instructions,
        [*_agent_tools(cfg, mcp), *(sub.as_tool() for sub in subagents)],
        max_steps=cfg.max_steps,
        max_parallel_children=cfg.max_parallel_children,
        deadline_s=cfg.deadline_s or None,  # 0: none
        context=ContextPolicy(
            max_context_tokens=cfg.max_context_tokens,
            max_tool_result_tokens=cfg.max_tool_result_tokens,
        ),
        settings=ModelSettings(max_tokens=cfg.max_tokens, temperature=cfg.temperature),
        tags=cfg.tags,
        description=cfg.description,
        output_type=_output_type(cfg),
        output_mode=cfg.output_mode,
        output_retries=cfg.output_retries,
        screening=_screening(cfg.screening, models),
        secrets=_secrets(cfg.secret_env, os.environ),
    )


def _screening(cfg: ScreeningConfig | None, models: Mapping[str, Model]) -> ScreeningPolicy | None:
    """A declared agent's screening policy, its guard model from the ``[[models]]`` pool."""
    if cfg is None:
        return None
    from podium.security.guard_model import GuardModel
    from podium.security.output_guard import OutputGuard
    from podium.security.screen import ScreeningPolicy

    guard = None
    if cfg.guard_model is not None:
        guard = GuardModel(
            models[cfg.guard_model],
            when=cfg.guard_when,
            budget_s=cfg.guard_budget_s,
            on_failure=cfg.guard_on_failure,
        )
    outputs = OutputGuard(allow_hosts=frozenset(cfg.output_hosts)) if cfg.outputs else None
    return ScreeningPolicy(
        action=cfg.action, on_block=cfg.on_block, threshold=cfg.threshold,
        outputs=outputs, guard=guard,
    )


def _secrets(names: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The values of the environment variables ``names`` (a name unset is refused: a
    secret meant to be scrubbed that is not would be scrubbed nowhere)."""
    missing = [n for n in names if not environ.get(n)]
    if missing:
        raise ConfigError(f"secret_env: {', '.join(missing)} not set in the environment")
    return [environ[n] for n in names]


def _output_type(cfg: AgentConfig) -> Any:
    """The declared agent's ``output_type`` by import path (a class, not an instance)."""
    if cfg.output_type is None:
        return None
    target = _import(cfg.output_type, "output_type")
    if not isinstance(target, type) and not hasattr(target, "__origin__"):
        raise ConfigError(
            f"output_type {cfg.output_type!r} is a {type(target).__name__}, not a type: name a "
            "msgspec Struct, a dataclass or a TypedDict"
        )
    return target


def served_agents(config: Config, models: Mapping[str, Model] | None = None) -> list[ServedSpec]:
    """The file's agents, by the names runs use (duplicates refused)."""
    models = build_models(config) if models is None else models
    mcp = MCPTools(config) if config.mcp_servers else None
    declared = {cfg.name: cfg for cfg in config.agents if cfg.name is not None}
    built: dict[int, Agent] = {}

    def build(cfg: AgentConfig) -> Agent:  # sub-agents first (load_config refused cycles)
        agent = built.get(id(cfg))
        if agent is None:
            subs = [build(declared[name]) for name in cfg.subagents]
            agent = built[id(cfg)] = build_agent(cfg, models, mcp, subs)
        return agent

    served: list[ServedSpec] = []
    for cfg in config.agents:
        agent = build(cfg)
        served.append(ServedSpec(cfg.name or agent.name, agent, cfg.pool))
    for cfg in config.agents:  # after all are built: hand-offs may go both ways
        if cfg.handoffs:
            build(cfg).add_handoffs(*(build(declared[name]) for name in cfg.handoffs))
    names = [s.name for s in served]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"agents: two agents are named {', '.join(map(repr, dupes))}")
    return served


def model_from_option(
    spec: str, config: Config | None = None, environ: Mapping[str, str] | None = None
) -> Model:
    """``--model``: a ``[[models]]`` name from the config, else a model id served at
    ``$OPENAI_BASE_URL`` (OpenAI's API when unset) with ``$OPENAI_API_KEY``."""
    env = os.environ if environ is None else environ
    if config is not None:
        models = build_models(config, env)
        if spec in models:
            return models[spec]
    cfg = ModelConfig(name=spec, model=spec)
    return _endpoint(cfg, env)


def builtin_agents() -> list[ServedSpec]:
    """The built-in examples that import, in the ``default`` pool: what a configuration
    without agents serves. The gateway and its workers both call this, so a file with no
    ``[[agents]]`` still gives them the same agents (one that fails to import is skipped
    with a warning: an example's optional dependency must not stop the others)."""
    served: list[ServedSpec] = []
    for name in BUILTIN_AGENTS:
        try:
            served.append(ServedSpec(name, resolve_agent(name)))
        except ConfigError as exc:
            log.warning("built-in agent %s unavailable: %s", name, exc)
    return served


def worker_agents(
    config: Config, specs: tuple[str, ...] | list[str], pool: str
) -> dict[str, Agent]:
    """What a ``podium worker`` of ``pool`` serves: the file's agents of that pool, by
    the names the gateway gives them, plus ``--agent [NAME=]MODULE:ATTR`` options. With
    neither, the ``default`` pool serves the built-in examples, as the gateway does."""
    if not config.agents and not specs and pool == "default":
        served_builtins = {s.name: s.agent for s in builtin_agents()}
        if served_builtins:
            return served_builtins
    extra = [msgspec.structs.replace(parse_agent_option(s), pool=pool) for s in specs]
    # The same agent named in the file and again with --agent is one agent, not two.
    extra = [a for a in extra if a not in config.agents]
    full = msgspec.structs.replace(config, agents=[*config.agents, *extra])
    served = [s for s in served_agents(full) if s.pool == pool]
    if not served:
        pools = sorted({a.pool for a in config.agents})
        where = f" (the config's agents are in pools: {', '.join(pools)})" if pools else ""
        raise ConfigError(f"no agents to serve in pool {pool!r}: pass --agent or --config{where}")
    return {s.name: s.agent for s in served}
