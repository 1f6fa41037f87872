"""A measured distribution: the profile's percentiles, read back as a quantile function.

A workload profile keeps each phase's wall time at a fixed set of percentiles
(:data:`~podium.engine.profile.QUANTILE_POINTS`, 0 to 100). Between two of them the
quantile function is taken as linear, which is what an empirical distribution with those
points as its knots is. Drawing ``u`` uniform in [0, 1) and reading the function at ``u``
draws from it: the simulation is driven by the shape that was measured, its tail
included, not by a mean.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence

import msgspec

__all__ = ("Distribution", "constant", "exponential_draw", "gamma_draw")


class Distribution(msgspec.Struct, frozen=True):
    """Values (seconds) at cumulative probabilities ``probs`` (0 to 1, increasing, first 0
    and last 1); linear in between."""

    probs: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def from_percentiles(cls, points: Sequence[float], values: Sequence[float]) -> Distribution:
        """From percentiles (0–100) and the values at them; values are made non-decreasing
        (nearest-rank percentiles always are; a hand-written file may not be)."""
        if len(points) != len(values) or len(points) < 2:
            raise ValueError("a distribution needs as many values as percentiles, at least 2")
        probs = tuple(p / 100.0 for p in points)
        if probs[0] != 0.0 or probs[-1] != 1.0 or any(b <= a for a, b in itertools.pairwise(probs)):
            raise ValueError("percentiles must increase from 0 to 100")
        out: list[float] = []
        for v in values:
            out.append(max(float(v), out[-1]) if out else float(v))
        return cls(probs, tuple(out))

    def quantile(self, u: float) -> float:
        """The value at cumulative probability ``u`` (0–1)."""
        probs, values = self.probs, self.values
        i = bisect.bisect_right(probs, u)
        if i >= len(probs):
            return values[-1]
        lo_p, hi_p = probs[i - 1], probs[i]
        lo_v, hi_v = values[i - 1], values[i]
        return lo_v + (hi_v - lo_v) * (u - lo_p) / (hi_p - lo_p)

    def draw(self, rng: random.Random) -> float:
        return self.quantile(rng.random())

    @property
    def mean(self) -> float:
        """The mean of the piecewise-linear quantile function (the average of each segment's
        two ends, weighted by its probability)."""
        return sum((b - a) * (va + vb) / 2 for a, b, va, vb in
                   zip(self.probs, self.probs[1:], self.values, self.values[1:], strict=False))

    def shifted(self, delta: float) -> Distribution:
        """Every value moved by ``delta``, none below 0."""
        return Distribution(self.probs, tuple(max(0.0, v + delta) for v in self.values))

    def cdf(self, x: float) -> float:
        """The cumulative probability at ``x`` (the quantile function's inverse)."""
        probs, values = self.probs, self.values
        if x < values[0]:
            return 0.0
        i = bisect.bisect_right(values, x)
        if i >= len(values):
            return 1.0
        lo_v, hi_v = values[i - 1], values[i]
        return probs[i - 1] + (probs[i] - probs[i - 1]) * (x - lo_v) / (hi_v - lo_v)

    def without_stalls(self, share: float, mean_s: float, points: int = 600) -> Distribution:
        """The distribution of ``X`` where this one is ``X + D``, ``D`` a host's stall: 0
        with probability ``1 - share``, else exponential of mean ``mean_s`` (a wait that
        ended while the loop was off its core, timed until it had one again).

        The CDFs satisfy ``F(w) = (1 - s)·G(w) + s·(G ∗ f)(w)``; with an exponential
        ``f`` the convolution ``C = G ∗ f`` obeys ``C' = (G - C) / mean``, so ``G`` is
        solved for on a grid, from 0 up, one point at a time (trapezoid rule); kept a
        CDF (non-decreasing, at most 1) where the percentiles' noise would break it.
        Read back at this distribution's own probabilities."""
        if share <= 0 or mean_s <= 0:
            return self
        share = min(share, 0.9)  # beyond, 1 / (1 - share) amplifies noise, not signal
        top = self.values[-1]
        if top <= 0:
            return self
        step = top / points
        decay = math.exp(-step / mean_s)
        grid = [0.0]
        cdf = [self.cdf(0.0) / (1 - share)]  # the convolution is 0 at 0
        conv = 0.0
        for j in range(1, points + 1):
            f = self.cdf(j * step)
            partial = conv * decay + (1 - decay) * cdf[-1] / 2
            g = (f - share * partial) / (1 - share + share * (1 - decay) / 2)
            g = min(1.0, max(cdf[-1], g))
            conv = partial + (1 - decay) * g / 2
            grid.append(j * step)
            cdf.append(g)
        return Distribution(self.probs, tuple(_inverse(grid, cdf, p) for p in self.probs))

    def less(self, delay: Distribution, draws: int = 4000, rounds: int = 8) -> Distribution:
        """The distribution of ``X`` where this one is ``X + D``, ``D`` independent and
        distributed as ``delay`` (the lag a timer on the same loop measured: what a wait
        that ended at a random moment waited for the loop, on its core or not).

        Found by matching: start from this one less ``D``'s mean, add ``D`` to it (stratified
        draws, the same every round), and move each percentile by how far the sum's misses
        this one's; ``rounds`` of that. Kept non-negative and non-decreasing."""
        if delay.values[-1] <= 0:
            return self
        rng = random.Random(0)
        grid = [(i + 0.5) / draws for i in range(draws)]
        lags = [delay.quantile(u) for u in grid]
        rng.shuffle(lags)
        values = [max(0.0, v - delay.mean) for v in self.values]
        for _ in range(rounds):
            guess = Distribution.from_percentiles([p * 100 for p in self.probs], values)
            sums = sorted(guess.quantile(u) + d for u, d in zip(grid, lags, strict=True))
            moved: list[float] = []
            for p, want, now in zip(self.probs, self.values, values, strict=True):
                got = sums[min(draws - 1, int(p * draws))]
                moved.append(max(0.0, now + want - got, moved[-1] if moved else 0.0))
            values = moved
        return Distribution(self.probs, tuple(values))

    def scaled(self, factor: float) -> Distribution:
        return Distribution(self.probs, tuple(v * factor for v in self.values))

    def with_quantile(self, u: float, target: float) -> Distribution:
        """The tail stretched (or shrunk) so that the value at ``u`` is ``target``: a tool
        whose p99 is 3 s while its typical call is as fast as measured (``--tool-p99 3s``).

        Below ``2u − 1`` (the p98 for a p99; never below the median) nothing moves: the
        body of the distribution is the one measured. From there to ``u`` the factor grows
        geometrically from 1 to ``target / value at u``; above ``u`` the values move by
        what the value at ``u`` moved (not by the factor, which would turn a measured
        p99.9 three times the p99 into calls three times the target). A ``target`` at or
        below the median scales everything instead."""
        median, now = self.quantile(0.5), self.quantile(u)
        if now <= 0:
            return Distribution(self.probs, tuple(target for _ in self.values))
        if target <= median or u <= 0.5:
            return self.scaled(target / now)
        start = max(0.5, 2 * u - 1)
        # Knots where the stretch starts and at u, so that both land exactly.
        knots = tuple(sorted({*self.probs, start, u}))
        values = tuple(self.quantile(p) for p in knots)
        k = target / now

        def moved(p: float, v: float) -> float:
            if p <= start:
                return v
            if p <= u:
                return v * float(k ** ((p - start) / (u - start)))
            return v + target - now

        return Distribution(knots, tuple(
            max(moved(p, v), 0.0) for p, v in zip(knots, values, strict=True)))


def _inverse(grid: Sequence[float], cdf: Sequence[float], p: float) -> float:
    """The least grid value (interpolated) whose CDF reaches ``p``."""
    i = bisect.bisect_left(cdf, p)
    if i == 0:
        return grid[0]
    if i >= len(cdf):
        return grid[-1]
    lo, hi = cdf[i - 1], cdf[i]
    return grid[i - 1] + (grid[i] - grid[i - 1]) * ((p - lo) / (hi - lo) if hi > lo else 1.0)


def constant(value: float) -> Distribution:
    return Distribution((0.0, 1.0), (value, value))


def exponential_draw(rng: random.Random, mean: float) -> float:
    return rng.expovariate(1.0 / mean) if mean > 0 else 0.0


def gamma_draw(rng: random.Random, mean: float, cv: float) -> float:
    """A draw with this mean and coefficient of variation (0: the mean itself; 1: an
    exponential)."""
    if mean <= 0:
        return 0.0
    if cv <= 0:
        return mean
    shape = 1.0 / (cv * cv)
    return rng.gammavariate(shape, mean / shape)

