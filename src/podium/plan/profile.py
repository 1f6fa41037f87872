"""Reading a workload profile: the JSON of ``podium bench --json`` (one load, or a sweep's)
or of ``podium runs profile --json``, as a :class:`~podium.plan.workload.RunShape`.

What is taken from it, per step: the CPU of each phase (the process's CPU where a bench
measured it: the loop's own work outside the phases is CPU a worker spends too), and the
model's and the tools' wall-time percentiles less their CPU, which are the waits.

A profile taken under load measured those waits with the loop's queueing in them (a call
that returned while the loop was busy was timed until the loop got to it), and on a shared
host with the host's stalls (the loop was off its core). Both are the simulation's to
add, so they come out first: where the profile has the loop's lag distribution (a timer's
lateness, which met both), the waits are deconvolved by it (:meth:`Distribution.less`);
otherwise the host's stalls (exponential episodes from the run-queue figures) are
deconvolved and the mean wait of a burst at the profile's own CPU utilization (M/G/1) is
taken off every percentile. A profile taken at light load on an idle host loses next to
nothing.

Anything it cannot use is a :class:`PlanError`: one line, saying what is wrong.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from podium.cli.common import UserError
from podium.engine.profile import PROFILE_FORMAT, QUANTILE_POINTS
from podium.plan.distribution import Distribution, constant
from podium.plan.queueing import mg1_wait
from podium.plan.simulate import LoopWakes
from podium.plan.workload import RunShape

__all__ = ("LOOP_TICK_S", "PlanError", "ProfileFacts", "load_profile", "loop_wakes",
           "read_profile", "wake_cost_across_levels")

#: The resolution of an event loop's poll timeout (asyncio's and uvloop's: whole ms).
LOOP_TICK_S = 0.001


class PlanError(UserError):
    """A profile, a target or an option the planner cannot work from: one line, exit 2."""


class ProfileFacts(msgspec.Struct, frozen=True):
    """What the profile says about the load it was taken at (for the report)."""

    path: str
    kind: str  # "bench", "sweep" or "runs"
    runs: int
    steps: int
    #: "process" (a bench: the whole process's CPU) or "phases" (a store's runs: the
    #: phases' CPU only, the loop's own work not counted).
    cpu_counted: str
    scenario: str | None = None
    concurrency: int | None = None
    utilization: float | None = None
    runs_per_s: float | None = None
    run_p99_s: float | None = None
    #: A sweep's best measured throughput of completed runs (runs/s).
    sweep_best_runs_per_s: float | None = None
    #: What makes this profile a weak basis for a plan, if anything.
    warning: str | None = None
    #: The CPU of one wake-up of the loop from idle taken out of the profile's CPU (µs),
    #: and where it comes from: "levels" (a sweep's levels: what a loaded worker pays) or
    #: "idle loop" (a loop sleeping with nothing else to do: a lower bound).
    wake_cpu_us: float | None = None
    wake_cpu_from: str | None = None


def read_profile(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise PlanError(f"{path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise PlanError(f"{path}: the file is empty: give the JSON of `podium bench --json` "
                        "or `podium runs profile --json`")
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise PlanError(f"{path}: not JSON: give the output of `podium bench --json` or "
                        "`podium runs profile --json`") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a profile is one JSON object, not {type(data).__name__}")
    return data


def load_profile(path: str, *, cpu_cv: float = 0.5,
                 name: str | None = None) -> tuple[RunShape, ProfileFacts]:
    """The run shape and the facts of the profile in ``path``."""
    data = read_profile(path)
    _check_format(path, data)
    kind = "sweep" if "sweep" in data else "bench" if "scenario" in data else "runs"
    runs, steps = _count(path, data, "runs"), _count(path, data, "steps")
    phases = data.get("phases")
    if not isinstance(phases, dict):
        raise PlanError(f"{path}: no 'phases': a partial profile (take it again)")
    model = _phase(path, phases, "model", required=True)
    assert model is not None  # required: missing is a PlanError
    tools = _phase(path, phases, "tools", required=False)
    tool_samples = int(tools.get("samples") or 0) if tools else 0

    def cpu_s(name: str) -> float:  # mean CPU seconds per step of a phase
        p = phases.get(name)
        value = p.get("cpu_ms_total", 0.0) if isinstance(p, dict) else 0.0
        return _number(path, f"phases.{name}.cpu_ms_total", value) / 1e3 / steps

    before = cpu_s("assemble") + cpu_s("model")
    after_model = cpu_s("parse") + cpu_s("tools")
    after_tools = cpu_s("merge") + cpu_s("checkpoint")
    profiled = before + after_model + after_tools
    process_us = data.get("cpu_us_per_step") if kind != "runs" else None
    cpu_counted = "phases"
    wake_us, wake_from = _wake_cost(path, data, kind)
    if isinstance(process_us, int | float) and process_us > 0 and profiled > 0:
        # The loop's own CPU, spread; less its wake-ups from idle, which a busy loop
        # does not spend (podium.observe.loopcost): what a burst costs under load.
        busy_us = process_us - _wakeups_per_step(path, data) * wake_us
        scale = max(1.0, busy_us / 1e6 / profiled)
        before, after_model, after_tools = before * scale, after_model * scale, \
            after_tools * scale
        cpu_counted = "process"
    if before + after_model + after_tools <= 0:
        raise PlanError(f"{path}: no CPU recorded in any phase: a partial profile")
    # Blocked time (a synchronous tool sleeping on the loop) holds the loop as CPU does,
    # though no CPU is spent: it joins the burst that dispatches the tools, and leaves the
    # tools' wait, which timed it.
    blocked = _blocked_s(path, phases, steps)
    after_model += blocked
    model_cpu = cpu_s("model")
    tool_cpu = (cpu_s("tools") + blocked) * steps / tool_samples if tool_samples else 0.0
    tool_wait = (_waits(path, "tools", tools, tool_cpu) if tools is not None and tool_samples
                 else constant(0.0))
    shape = RunShape(
        name=name or Path(path).stem,
        steps=steps / runs,
        tool_share=tool_samples / steps,
        cpu_before_model=before,
        cpu_after_model=after_model,
        cpu_after_tools=after_tools,
        model_wait=_waits(path, "model", model, model_cpu),
        tool_wait=tool_wait,
        cpu_cv=cpu_cv,
    )
    utilization = data.get("cpu_utilization") if kind != "runs" else None
    if isinstance(utilization, int | float) and 0 < utilization < 1:
        # The host's stalls and the loop's queueing that the measured waits include (see
        # the module docstring): the one taken out of the distribution, the other's mean
        # off every percentile.
        rate = utilization / shape.mean_burst  # bursts per second
        delay = mg1_wait(rate, shape.mean_burst, cpu_cv)
        share, episode = _host_stalls(path, data)
        lag = _lag(path, data)

        def waits(d: Distribution) -> Distribution:
            if lag is not None:  # both, as a timer on the loop met them
                return d.less(lag)
            return d.without_stalls(share, episode).shifted(-delay)

        shape = msgspec.structs.replace(
            shape, model_wait=waits(shape.model_wait),
            tool_wait=waits(shape.tool_wait) if tool_samples else shape.tool_wait)
    best = None
    if kind == "sweep" and isinstance(data.get("sweep"), list):
        rates = [p.get("completed_runs_per_s") for p in data["sweep"] if isinstance(p, dict)]
        best = max((r for r in rates if isinstance(r, int | float)), default=None)
    facts = ProfileFacts(
        path=path, kind=kind, runs=runs, steps=steps, cpu_counted=cpu_counted,
        scenario=data.get("scenario") if isinstance(data.get("scenario"), str) else None,
        concurrency=data.get("concurrency") if isinstance(data.get("concurrency"), int)
        else None,
        utilization=float(utilization) if isinstance(utilization, int | float) else None,
        runs_per_s=_opt_float(data.get("completed_runs_per_s")),
        run_p99_s=_opt_ms(data.get("completed_run_wall_p99_ms")),
        sweep_best_runs_per_s=best,
        warning=_warning(kind, utilization),
        wake_cpu_us=wake_us if wake_from else None, wake_cpu_from=wake_from,
    )
    return shape, facts


#: Above this CPU utilization a profile's waits are mostly the loop's queueing, which the
#: M/G/1 correction removes only roughly.
_BUSY = 0.8


def _warning(kind: str, utilization: Any) -> str | None:
    if isinstance(utilization, int | float) and utilization >= _BUSY:
        level = "its last level was" if kind == "sweep" else "it was"
        return (f"{level} taken at {utilization:.0%} CPU: its waits are mostly queueing; "
                "a profile at lighter load (under 50 %) plans better")
    return None


def _check_format(path: str, data: dict[str, Any]) -> None:
    found = data.get("profile_format")
    if found is None:
        raise PlanError(
            f"{path}: no profile_format: a profile from a podium before this planner (or "
            f"not a profile); take it again with `podium bench --json` or "
            f"`podium runs profile --json` (format {PROFILE_FORMAT})")
    if found != PROFILE_FORMAT:
        raise PlanError(f"{path}: profile format {found!r}, this podium reads format "
                        f"{PROFILE_FORMAT}: take the profile again with this version")


def _count(path: str, data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PlanError(f"{path}: {key!r} missing or not a count: a partial profile")
    if value == 0:
        raise PlanError(f"{path}: an empty profile ({key} = 0): nothing was measured")
    return value


def _phase(path: str, phases: dict[str, Any], name: str, *,
           required: bool) -> dict[str, Any] | None:
    p = phases.get(name)
    if p is None and not required:
        return None
    if not isinstance(p, dict) or not p.get("samples"):
        if not required:
            return None
        raise PlanError(f"{path}: phase {name!r} has no samples: a partial profile")
    if not isinstance(p.get("wall_quantiles_ms"), list):
        raise PlanError(f"{path}: phase {name!r} has no wall_quantiles_ms: a partial profile")
    return p


def _waits(path: str, name: str, phase: dict[str, Any], cpu_s: float) -> Distribution:
    values = phase["wall_quantiles_ms"]
    if len(values) != len(QUANTILE_POINTS) or not all(
            isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
        raise PlanError(f"{path}: phase {name!r}: wall_quantiles_ms must be "
                        f"{len(QUANTILE_POINTS)} non-negative numbers")
    dist = Distribution.from_percentiles(QUANTILE_POINTS, [v / 1e3 for v in values])
    return dist.shifted(-cpu_s)  # the wait is the wall time less the CPU done in it


def _blocked_s(path: str, phases: dict[str, Any], steps: int) -> float:
    """Mean seconds per step that the phases held the loop without CPU (``blocked_ms_total``,
    0 in a profile whose tools never blocked)."""
    total = 0.0
    for name, p in phases.items():
        if isinstance(p, dict) and p.get("blocked_ms_total"):
            total += _number(path, f"phases.{name}.blocked_ms_total", p["blocked_ms_total"])
    return total / 1e3 / steps


def _wakeups_per_step(path: str, data: dict[str, Any]) -> float:
    """The loop's wake-ups from idle per step (0 in a profile without the figure)."""
    wakeups = data.get("loop_wakeups_per_step")
    return 0.0 if wakeups is None else _number(path, "loop_wakeups_per_step", wakeups)


#: The least spread of wake-ups per step between a sweep's levels that prices a wake-up
#: (closer levels leave the slope to the host's noise).
_LEVELS_SPREAD = 0.05


def wake_cost_across_levels(levels: list[tuple[float, float]]) -> float | None:
    """What one wake-up from idle costs a loaded worker (µs), from levels of one load test
    each ``(cpu_us_per_step, wakeups_per_step)``: the least-squares slope of the CPU on the
    wake-ups. A loop that sleeps at light load and wakes often pays, besides the kernel's
    switch, for the caches the machine's other work took meanwhile: on a shared 2-core
    host 150–200 µs a wake-up against 50–90 µs for a loop sleeping with nothing else to
    do. None where the levels cannot tell (fewer than two, wake-ups per step spread less
    than 0.05, or a slope not positive)."""
    if len(levels) < 2:
        return None
    xs = [w for _, w in levels]
    if max(xs) - min(xs) < _LEVELS_SPREAD:
        return None
    mx = sum(xs) / len(xs)
    my = sum(c for c, _ in levels) / len(levels)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (c - my) for c, x in levels) / sxx
    return slope if slope > 0 else None


def _wake_cost(path: str, data: dict[str, Any], kind: str) -> tuple[float, str | None]:
    """The CPU of one wake-up (µs) and where it comes from: a sweep's levels where they
    price it above the idle loop's figure, else the idle loop's (0, None without it)."""
    idle = data.get("loop_wake_cpu_us")
    idle_us = None if idle is None else _number(path, "loop_wake_cpu_us", idle)
    points = data.get("sweep") if kind == "sweep" else None
    levels = [(float(p["cpu_us_per_step"]), float(p["loop_wakeups_per_step"]))
              for p in (points if isinstance(points, list) else [])
              if isinstance(p, dict) and isinstance(p.get("cpu_us_per_step"), int | float)
              and isinstance(p.get("loop_wakeups_per_step"), int | float)]
    loaded = wake_cost_across_levels(levels)
    if loaded is not None and (idle_us is None or loaded > idle_us):
        return loaded, "levels"
    return (idle_us, "idle loop") if idle_us is not None else (0.0, None)


def _lag(path: str, data: dict[str, Any]) -> Distribution | None:
    """The loop's lag (a timer's lateness: its queueing and the host's stalls together, as
    a wait ending at a random moment met them), None in a profile without it."""
    values = data.get("loop_lag_quantiles_ms")
    if not values:
        return None
    if len(values) != len(QUANTILE_POINTS) or not all(
            isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values):
        raise PlanError(f"{path}: loop_lag_quantiles_ms must be {len(QUANTILE_POINTS)} "
                        "non-negative numbers")
    return Distribution.from_percentiles(QUANTILE_POINTS, [v / 1e3 for v in values])


def _host_stalls(path: str, data: dict[str, Any]) -> tuple[float, float]:
    """How the host kept the loop off its core while the profile was taken: the share of
    the time and the mean episode (seconds); a wait that ended in one was timed until the
    loop had its core back (0, 0 in a profile without the figures)."""
    share, episode = data.get("loop_runqueue_share"), data.get("loop_runqueue_episode_ms")
    if share is None or episode is None:
        return 0.0, 0.0
    return (_number(path, "loop_runqueue_share", share),
            _number(path, "loop_runqueue_episode_ms", episode) / 1e3)


def _number(path: str, where: str, value: Any) -> float:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise PlanError(f"{path}: {where}: expected a non-negative number, got {value!r}")
    return float(value)


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _opt_ms(value: Any) -> float | None:
    return float(value) / 1e3 if isinstance(value, int | float) else None


def loop_wakes(facts: list[ProfileFacts]) -> LoopWakes | None:
    """How the profiled workers' loops wake (:class:`~podium.plan.simulate.LoopWakes`):
    at the price of a wake-up the profiles took out of their CPU (the dearest, where
    several), on the loop's millisecond tick where the waits are a bench's simulated
    model and tools (timers); a store's runs waited on I/O, which wakes a loop at once.
    None where no profile priced a wake-up."""
    prices = [f.wake_cpu_us for f in facts if f.wake_cpu_us]
    if not prices:
        return None
    timers = all(f.kind in ("bench", "sweep") for f in facts)
    return LoopWakes(max(prices) / 1e6, LOOP_TICK_S if timers else 0.0)
