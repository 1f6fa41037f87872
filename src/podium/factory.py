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

import copy
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from podium.agent import Agent, ContextPolicy
from podium.config import AgentConfig, Config, ModelConfig, ScreeningConfig
from podium.errors import ConfigError
from podium.factory_mcp import MCPTools, build_mcp_servers
from podium.factory_models import build_models, openai_endpoint
from podium.models.base import Model, ModelSettings
from podium.tools.tool import Tool

if TYPE_CHECKING:
    from podium.security.screen import ScreeningPolicy

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


def with_model(agent: Agent, model: Model) -> Agent:
    """The same agent on another model: every other setting kept as it is (the prompt
    prefix depends on instructions, tools and tokenizer only, so it is shared too)."""
    clone = copy.copy(agent)
    clone.model = model
    if clone.output_type is not None:  # the new model may be asked for it another way
        clone._bind_output()
    return clone


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
    return openai_endpoint(cfg, env)


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
