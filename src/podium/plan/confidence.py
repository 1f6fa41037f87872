"""How far a measured percentile can be trusted: its confidence interval.

A load test's run latencies are not independent draws. A stall of the host, a garbage
collection or a burst of arrivals holds every run in flight at once, so neighbouring
runs are slow together, and a p99 taken from 15,000 runs can rest on a handful of such
episodes. The textbook interval of a quantile (the binomial one: ranks
``n·q ± z·sqrt(n·q·(1 − q))``) counts every run as independent and is then far too
narrow. :func:`quantile_interval` resamples whole *blocks* of consecutive runs (a moving
block bootstrap), which keeps the runs that were slow together together: where the tail
came from one episode, some resamples have it twice and some not at all, and the interval
says so. :func:`binomial_interval` is the independent-draws interval, for comparison.

Both are pure functions of the latencies (in arrival order for the blocks) and a seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from podium.engine.profile import percentile

__all__ = ("binomial_interval", "quantile_interval")

#: The two-sided 95 % point of the standard normal.
_Z95 = 1.959964


def binomial_interval(values: Sequence[float], q: float) -> tuple[float, float]:
    """The 95 % distribution-free interval of the ``q`` percentile (0–100) of independent
    draws: the order statistics at ranks ``n·p ± 1.96·sqrt(n·p·(1 − p))``."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    p = q / 100.0
    half = _Z95 * math.sqrt(n * p * (1.0 - p))
    lo = max(1, math.floor(n * p - half))
    hi = min(n, math.ceil(n * p + half))
    return ordered[lo - 1], ordered[hi - 1]


def quantile_interval(values: Sequence[float], q: float, *, blocks: int = 20,
                      resamples: int = 400, seed: int = 1) -> tuple[float, float]:
    """The 95 % interval of the ``q`` percentile (0–100) of ``values`` in the order they
    were taken (arrival order): ``values`` cut into ``blocks`` runs of consecutive values,
    ``resamples`` series of as many blocks drawn with replacement (each a block's worth
    of consecutive values from a random start), their percentiles' 2.5th and 97.5th.
    Deterministic for a seed."""
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    size = max(1, n // max(1, blocks))
    starts = n - size + 1
    count = math.ceil(n / size)
    rng = random.Random(seed)
    estimates = []
    for _ in range(resamples):
        sample: list[float] = []
        for _ in range(count):
            s = rng.randrange(starts)
            sample.extend(values[s:s + size])
        sample.sort()
        estimates.append(percentile(sample, q))
    estimates.sort()
    return percentile(estimates, 2.5), percentile(estimates, 97.5)
