"""Per-phase wall and CPU clocks for the steps of one run, with as few clock reads as possible.

The exact way (the CPU clock read only around a run's synchronous slices, each
slice's CPU split among its phases by running wall time) is told in
:mod:`podium.engine.exact_stopwatch`.

The engine's default is :class:`SampledStopwatch`, which splits no slice: it
estimates each phase's CPU as its running time times the thread's CPU/running
ratio, measured with the CPU clock around one slice in :data:`SAMPLE_EVERY`;
:class:`Stopwatch` (``clock="thread"``) reads it around every slice, for the exact
split. ``Engine(profile=False)`` uses :class:`NoStopwatch`: no clock is
read at all.

This module is the stopwatches' import path: :class:`Stopwatch` lives in
:mod:`podium.engine.exact_stopwatch` (with the figures' layout), :class:`SampledStopwatch`
in :mod:`podium.engine.sampled_stopwatch`; :class:`NoStopwatch` and :func:`cpu_clock` here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar, Literal, get_args

from podium.engine.exact_stopwatch import ENDS, MODEL_NS, Stopwatch, _figures
from podium.engine.profile import StepProfile
from podium.engine.sampled_stopwatch import SAMPLE_EVERY, SAMPLED_TOLERANCE, SampledStopwatch
from podium.errors import ConfigError

__all__ = (
    "ENDS",
    "MODEL_NS",
    "SAMPLED_TOLERANCE",
    "SAMPLE_EVERY",
    "CpuClock",
    "NoStopwatch",
    "SampledStopwatch",
    "Stopwatch",
    "cpu_clock",
)

CpuClock = Literal["sampled", "thread", "wall"]


def cpu_clock(kind: CpuClock) -> Callable[[], int]:
    """``thread`` and ``sampled``: the loop thread's CPU time. ``wall``: the monotonic
    clock, equal to CPU time for synchronous slices unless the OS preempts the thread."""
    if kind not in get_args(CpuClock):  # a typo would silently pick the exact, costly clock
        raise ConfigError(f"clock={kind!r}: choose one of {', '.join(get_args(CpuClock))}")
    return time.perf_counter_ns if kind == "wall" else time.thread_time_ns


# What every NoStopwatch holds: figures that stay zero (the driver reads them) and no steps.
# Shared, written with zeros only (the step loop's stamps, NoStopwatch.stamp: int() reads
# no clock): a run without a profile holds no list of its own for them.
_IDLE_FIGURES: list[int] = _figures()
_NO_STEPS: list[StepProfile] = []


class NoStopwatch(Stopwatch, gc=False):
    """``Engine(profile=False)``: the same calls, no clock read, no profile."""

    #: The step loop's stamps read no clock: they write 0, "not stamped".
    stamp: ClassVar[Callable[[], int]] = int

    @classmethod
    def start(
        cls,
        clock: Callable[[], int],
        sink: Callable[[StepProfile], None] | None = None,
        steps: list[StepProfile] | None = None,
    ) -> Stopwatch:
        return cls(clock, None, _IDLE_FIGURES, _NO_STEPS)

    def fold(self) -> None:
        pass

    def lap(self, phase: int) -> None:
        pass

    def suspend(self, phase: int) -> None:
        pass

    def resume(self, phase: int) -> None:
        pass

    def add_cpu(self, phase: int, ns: int) -> None:
        pass

    def add_blocked(self, phase: int, ns: int) -> None:
        pass

    def carry(self, profile: StepProfile) -> None:
        pass

    def snapshot(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        return None

    def close_step(self, profile: StepProfile | None) -> None:
        pass

    def close_new(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        return None

    def close_final(self, step: int, ttft_ns: int) -> StepProfile | None:
        return None

    def settle(self) -> None:
        pass

    def finish(self) -> None:
        pass
