"""One kind of run as the planner sees it: its steps, the CPU of each, and what it waits on.

Built from a workload profile (:mod:`podium.plan.profile`) and changed by the what-if
options (``--model-latency x2``, ``--tool-p99 3s``, ``--steps 12``, ``--cpu-per-step``):
each is a pure function returning a new :class:`RunShape`.

A step's CPU is split in three bursts, by the phases the profile measured:

- before the model call: ``assemble`` and the model call's own CPU (encoding, sending);
- after the reply: ``parse`` and the dispatch of the tools;
- after the tools: ``merge`` and ``checkpoint``.

The process's CPU outside the phases (the loop, timers, the garbage collector), which
a bench profile measures, is spread over the three in proportion. Bursts with no wait
between them are one burst: the last of a step and the first of the next run together
on the loop.
"""

from __future__ import annotations

import functools
import math
import random

import msgspec

from podium.plan.distribution import Distribution

__all__ = ("RunShape",)


class RunShape(msgspec.Struct, frozen=True):
    """What one run of an agent does, on average and in distribution (seconds)."""

    name: str
    #: Mean steps (model calls) per run; a fractional mean is drawn between its neighbours.
    steps: float
    #: Share of the steps that call tools (the last step of a run answers without).
    tool_share: float
    #: Mean CPU seconds of the three bursts of a step (see the module's docstring).
    cpu_before_model: float
    cpu_after_model: float
    cpu_after_tools: float
    model_wait: Distribution
    tool_wait: Distribution
    #: Coefficient of variation of a burst's CPU around its mean (the profile keeps CPU
    #: totals, not their spread; 1.0 would be an exponential, 0 a constant).
    cpu_cv: float = 0.5

    @property
    def cpu_per_step(self) -> float:
        return self.cpu_before_model + self.cpu_after_model + self.cpu_after_tools

    @property
    def cpu_per_run(self) -> float:
        return self.steps * self.cpu_per_step

    @property
    def bursts_per_step(self) -> float:
        """Bursts on the loop per step: one per wait that ends (model, tools)."""
        return 1.0 + self.tool_share

    @property
    def mean_burst(self) -> float:
        return self.cpu_per_step / self.bursts_per_step

    @property
    def wait_per_run(self) -> float:
        """Mean seconds a run waits on the model and the tools, with no queueing at all."""
        return self.steps * (self.model_wait.mean + self.tool_share * self.tool_wait.mean)

    # -- the simulation's view (podium.plan.simulate.Workload) --------------------------

    def _steps(self, rng: random.Random) -> int:
        low = math.floor(self.steps)
        return max(1, low + (1 if rng.random() < self.steps - low else 0))

    def segments(self, rng: random.Random) -> tuple[list[float], frozenset[int]]:
        n = self._steps(rng)
        with_tools = min(n - 1, round(self.tool_share * n)) if n > 1 else 0
        means = _burst_means(n, with_tools, self.cpu_before_model, self.cpu_after_model,
                             self.cpu_after_tools)
        spread = _unit_draws(self.cpu_cv)
        size = len(spread)
        model, tool = self.model_wait, self.tool_wait
        models = _model_indexes(n, with_tools)
        out: list[float] = []
        for i, mean in enumerate(means):
            if i:  # the wait before this burst
                out.append(model.draw(rng) if 2 * i - 1 in models else tool.draw(rng))
            out.append(mean * spread[int(rng.random() * size)])
        return out, models

    # -- what-ifs ---------------------------------------------------------------------

    def with_model_factor(self, factor: float) -> RunShape:
        """Model calls ``factor`` times as long, in every percentile."""
        return msgspec.structs.replace(self, model_wait=self.model_wait.scaled(factor))

    def with_tool_p99(self, seconds: float) -> RunShape:
        """Tool calls whose p99 is ``seconds``: the top of the tail stretched, the body
        (up to the p98) as measured."""
        return msgspec.structs.replace(self, tool_wait=self.tool_wait.with_quantile(0.99,
                                                                                    seconds))

    def with_steps(self, steps: float) -> RunShape:
        """``steps`` model calls per run. A run that called tools in every step but its
        answer still does; otherwise the same share of steps calls tools."""
        react = self.steps > 1 and self.tool_share * self.steps >= self.steps - 1 - 1e-6
        share = (steps - 1) / steps if react else self.tool_share
        return msgspec.structs.replace(self, steps=steps, tool_share=max(0.0, share))

    def with_cpu_share(self, share: float) -> RunShape:
        """Each worker's loop given ``share`` of a core (0 < share ≤ 1), as on a machine
        whose other processes take the rest: every burst takes ``1 / share`` as long."""
        if not 0 < share <= 1:
            raise ValueError(f"a CPU share is in (0, 1], not {share!r}")
        return self.with_cpu_per_step(self.cpu_per_step / share)

    def with_cpu_per_step(self, seconds: float) -> RunShape:
        """``seconds`` of CPU per step, split as measured."""
        now = self.cpu_per_step
        if now <= 0:
            third = seconds / 3
            return msgspec.structs.replace(self, cpu_before_model=third,
                                           cpu_after_model=third, cpu_after_tools=third)
        k = seconds / now
        return msgspec.structs.replace(
            self, cpu_before_model=self.cpu_before_model * k,
            cpu_after_model=self.cpu_after_model * k, cpu_after_tools=self.cpu_after_tools * k)


@functools.lru_cache(maxsize=256)
def _burst_means(steps: int, with_tools: int, before: float, after_model: float,
                 after_tools: float) -> tuple[float, ...]:
    """The mean CPU of each burst of a run, in order (see the module's docstring)."""
    out: list[float] = []
    pending = 0.0
    for i in range(steps):
        out.append(pending + before)
        pending = after_model
        if i < with_tools:
            out.append(pending)
            pending = 0.0
        pending += after_tools
    out.append(pending)
    return tuple(out)


@functools.lru_cache(maxsize=16)
def _unit_draws(cv: float) -> tuple[float, ...]:
    """A gamma distribution of mean 1 and this coefficient of variation, as 4,096 equally
    likely values (its quantiles): a draw is one index, twenty times cheaper than
    ``random.gammavariate`` and as good for a simulation's bursts."""
    if cv <= 0:
        return (1.0,)
    shape = 1.0 / (cv * cv)
    rng = random.Random(0)
    values = sorted(rng.gammavariate(shape, 1.0 / shape) for _ in range(4096))
    mean = sum(values) / len(values)
    return tuple(v / mean for v in values)


@functools.lru_cache(maxsize=256)
def _model_indexes(steps: int, with_tools: int) -> frozenset[int]:
    """Where :meth:`RunShape.segments` puts the model calls: the steps with tools come
    first (burst, model, burst, tools: four segments a step), then those without (burst,
    model: two)."""
    tooled = {1 + 4 * i for i in range(with_tools)}
    return frozenset(tooled | {4 * with_tools + 1 + 2 * j for j in range(steps - with_tools)})
