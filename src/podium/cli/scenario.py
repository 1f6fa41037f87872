"""Bench scenarios: a TOML or YAML file that sets the agent, its tools, the model and the load.

Example (``examples/scenarios/react.toml``)::

    [load]
    runs = 2000
    concurrency = 1000

    [agent]
    name = "react"
    instructions = "You are a research agent."
    max_steps = 12

    [model]
    ttft_ms = 150
    per_token_ms = 10
    jitter = "lognormal"
    capacity = 0          # concurrent sequences; 0 = unbounded

    [script]
    tool = "lookup"
    arguments = { query = "podium" }
    tool_steps = 6
    parallel = 1

    [[tools]]
    name = "lookup"
    kind = "async"        # async | sync (thread pool) | cpu (process pool)
    latency_ms = 50
    result_chars = 400
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from podium.agent import Agent, ContextPolicy
from podium.errors import ConfigError
from podium.models.simulated import LatencyModel, Scenario, SimStep, SimToolCall, SimulatedModel
from podium.tools.tool import Tool, tool

__all__ = ("BenchScenario", "build_agent", "load_scenario")


class LoadSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    runs: Annotated[int, msgspec.Meta(ge=1)] = 2000
    concurrency: Annotated[int, msgspec.Meta(ge=1)] = 1000


#: Times, sizes and counts: a negative one is a mistake (a negative TTFT ran as no wait at
#: all, and the bench measured a model the user did not describe).
Ms = Annotated[float, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]


class AgentSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str = "react"
    instructions: str = "You are a research agent. Use the tools to answer."
    max_steps: AtLeastOne = 12
    max_context_tokens: AtLeastOne = 32_000
    max_tool_result_tokens: AtLeastOne = 2_000


class ModelSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    ttft_ms: Ms = 150.0
    per_token_ms: Ms = 10.0
    prefill_per_token_ms: Ms = 0.0
    jitter: Literal["none", "lognormal"] = "lognormal"
    sigma: Ms = 0.25
    capacity: Count = 0
    output_tokens: Count | None = None
    seed: int | None = 1


class ScriptSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str = "lookup"
    arguments: dict[str, Any] = msgspec.field(default_factory=lambda: {"query": "podium"})
    tool_steps: Count = 6
    parallel: Count = 1
    final: str = "Here is what I found."
    steps: list[list[SimToolCall]] | None = None


class ToolSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    kind: Literal["async", "sync", "cpu"] = "async"
    latency_ms: Ms = 50.0
    jitter: Literal["none", "lognormal"] = "lognormal"
    sigma: Ms = 0.25
    result_chars: Count = 400
    # A probability: 2 failed every call, and the bench measured only errors.
    error_rate: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    retries: Count = 0
    description: str = "Look something up."


class BenchScenario(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    load: LoadSpec = LoadSpec()
    agent: AgentSpec = AgentSpec()
    model: ModelSpec = ModelSpec()
    script: ScriptSpec = ScriptSpec()
    tools: list[ToolSpec] = msgspec.field(default_factory=lambda: [ToolSpec("lookup")])


def load_scenario(path: str | Path | None) -> BenchScenario:
    """Read a scenario file (``.toml``, ``.yaml``/``.yml``); ``None`` gives the default one."""
    if path is None:
        return BenchScenario()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"scenario {p}: {exc.strerror}") from exc
    if p.suffix == ".toml":
        try:
            raw: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"scenario {p}: {exc}") from exc
    else:
        import yaml  # for a YAML scenario only: not loaded by every `podium` command

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"scenario {p}: {exc}") from exc
    _check_finite(raw, "", p)
    try:
        scenario = msgspec.convert(raw or {}, BenchScenario)
    except msgspec.ValidationError as exc:
        # "Expected `float` >= 0.0 - at `$.model.ttft_ms`" as "model.ttft_ms: Expected ..."
        message, _, at = str(exc).partition(" - at `")
        where = at.rstrip("`").removeprefix("$").lstrip(".")
        raise ConfigError(f"scenario {p}: {where + ': ' if where else ''}{message}") from None
    _check_tools(scenario, p)
    return scenario


def _check_finite(node: Any, where: str, path: Path) -> None:
    """TOML and YAML read ``inf`` and ``nan``: a time of ``inf`` would never end."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_finite(value, f"{where}.{key}" if where else str(key), path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_finite(value, f"{where}[{i}]", path)
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"scenario {path}: {where}: must be a finite number, got {node}")


def _check_tools(scenario: BenchScenario, path: Path) -> None:
    """Every tool the script calls must be defined: else every call is an error
    observation and the bench measures nothing the user meant."""
    s = scenario.script
    if s.steps is not None:
        called = {c.name for step in s.steps for c in step}
    else:
        called = {s.tool} if s.tool_steps > 0 and s.parallel > 0 else set()
    defined = {t.name for t in scenario.tools}
    unknown = sorted(called - defined)
    if unknown:
        raise ConfigError(
            f"scenario {path}: the script calls {', '.join(map(repr, unknown))}, which no "
            f"[[tools]] entry defines (defined: {', '.join(sorted(defined)) or 'none'})"
        )


def _latency_s(rng: random.Random, spec: ToolSpec) -> float:
    base = spec.latency_ms / 1000
    if spec.jitter == "lognormal" and base > 0:
        base *= math.exp(rng.gauss(-spec.sigma * spec.sigma / 2, spec.sigma))
    return base


def _make_tool(spec: ToolSpec, seed: int) -> Tool[Any, Any]:
    rng = random.Random(seed)
    payload = ("lorem ipsum dolor sit amet " * (spec.result_chars // 27 + 1))[: spec.result_chars]

    def outcome(query: str) -> str:
        if spec.error_rate and rng.random() < spec.error_rate:
            raise RuntimeError(f"{spec.name} backend error")
        return f"{query}: {payload}"

    if spec.kind == "async":

        async def run_async(query: str) -> str:
            delay = _latency_s(rng, spec)
            if delay > 0:
                await asyncio.sleep(delay)
            return outcome(query)

        fn: Any = run_async
    elif spec.kind == "sync":

        def run_sync(query: str) -> str:
            delay = _latency_s(rng, spec)
            if delay > 0:
                time.sleep(delay)
            return outcome(query)

        fn = run_sync
    else:
        fn = _cpu_burn_tool(spec)
    fn.__name__ = spec.name
    fn.__doc__ = f"{spec.description}\n\nArgs:\n    query: What to look up."
    return tool(timeout=spec.timeout_s, retries=spec.retries, cpu_bound=spec.kind == "cpu")(fn)


def _cpu_burn_tool(spec: ToolSpec) -> Any:
    from podium.cli import _cpu_tools

    _cpu_tools.BURN_MS[spec.name] = spec.latency_ms
    return _cpu_tools.make(spec.name)


def build_agent(scenario: BenchScenario) -> Agent:
    """The scenario's agent on a simulated model."""
    m, s, a = scenario.model, scenario.script, scenario.agent
    tools = [_make_tool(t, i) for i, t in enumerate(scenario.tools)]
    if s.steps is not None:
        script = Scenario(
            steps=tuple(SimStep(tool_calls=tuple(step)) for step in s.steps),
            final=s.final,
            output_tokens=m.output_tokens,
        )
    else:
        call = SimToolCall(s.tool, s.arguments)
        script = Scenario(
            steps=tuple(SimStep(tool_calls=(call,) * s.parallel) for _ in range(s.tool_steps)),
            final=s.final,
            output_tokens=m.output_tokens,
        )
    latency = LatencyModel(
        ttft_s=m.ttft_ms / 1000,
        per_token_s=m.per_token_ms / 1000,
        prefill_per_token_s=m.prefill_per_token_ms / 1000,
        jitter=m.jitter,
        sigma=m.sigma,
    )
    model = SimulatedModel(script, latency=latency, capacity=m.capacity or None, seed=m.seed)
    return Agent(
        a.name,
        model,
        a.instructions,
        tools,
        max_steps=a.max_steps,
        context=ContextPolicy(
            max_context_tokens=a.max_context_tokens, max_tool_result_tokens=a.max_tool_result_tokens
        ),
    )
