"""Garbage-collector settings for serving processes, chosen by measurement.

A serving process allocates short-lived objects at a high rate (futures,
timer handles, coroutines of waiting calls) while holding thousands of
long-lived sessions. With CPython's default thresholds (700, 10, 10) the
young generation is collected every few hundred allocations and the old
ones often enough that the collector shows up in every phase. Measured with
``podium bench`` (2,000 runs, 1,000 concurrent, uvloop, this 2-core machine):

=====================  ==============  ====================
gen0, gen1, gen2        CPU µs / step   event-loop lag p99
=====================  ==============  ====================
700, 10, 10 (default)   274–295         74–95 ms
10 000, 10, 10          235             42 ms
50 000, 20, 100         236             34 ms
100 000, 50, 1 000      224–227         38–45 ms
collector disabled      226             16 ms
=====================  ==============  ====================

So serving processes freeze their start-up objects (modules, agents, tools:
never scanned again) and raise the thresholds. The library itself never
touches the collector; the ``podium`` commands call :func:`tune_for_serving`.
``PODIUM_GC=default`` keeps CPython's settings; ``PODIUM_GC=a,b,c`` sets others.
"""

from __future__ import annotations

import gc
import os

from podium.errors import ConfigError

__all__ = ("SERVING_THRESHOLDS", "check_gc_env", "tune_for_serving")

SERVING_THRESHOLDS: tuple[int, int, int] = (50_000, 20, 100)


def tune_for_serving(thresholds: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """Freeze what exists now and set the collector's thresholds; returns those in force."""
    setting = os.environ.get("PODIUM_GC", "")
    if setting == "default":
        return gc.get_threshold()
    if thresholds is None:
        thresholds = SERVING_THRESHOLDS
        if setting:
            thresholds = _thresholds(setting)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return thresholds


def check_gc_env() -> None:
    """Refuse a bad ``PODIUM_GC`` now: the commands tune the collector only once they
    serve, after announcing it, where a mistake would follow a "serving" line."""
    setting = os.environ.get("PODIUM_GC", "")
    if setting and setting != "default":
        _thresholds(setting)


def _thresholds(setting: str) -> tuple[int, int, int]:
    """``PODIUM_GC=a,b,c``; anything else is one line naming the variable (it was a
    traceback from every serving process)."""
    parts = setting.split(",")
    try:
        a, b, c = (int(part) for part in parts)
    except ValueError:
        raise ConfigError(
            f"PODIUM_GC: expected 'default' or three whole numbers a,b,c, got {setting!r}"
        ) from None
    if min(a, b, c) < 0:
        raise ConfigError(f"PODIUM_GC: thresholds are 0 or more, got {setting!r}")
    return a, b, c
