"""Per-phase wall and CPU clocks for one step, with as few clock reads as possible.

Each phase boundary is one read of each clock. A phase that suspends (awaits
something that really waits) adds one read at the suspension and one at the
resumption, so other runs' CPU never lands in this run's phases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ("CpuClock", "Stopwatch", "cpu_clock")

CpuClock = Literal["thread", "wall"]

_perf = time.perf_counter_ns


def cpu_clock(kind: CpuClock) -> Callable[[], int]:
    """``thread``: the loop thread's CPU time (exact). ``wall``: the monotonic clock,
    equal to CPU time for synchronous slices unless the OS preempts the thread; cheaper
    where reading the thread clock is a slow system call."""
    return time.thread_time_ns if kind == "thread" else time.perf_counter_ns


class Stopwatch:
    __slots__ = ("_clock", "_cpu_base", "_wall_base", "cpu", "wall")

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self.wall = [0, 0, 0, 0, 0, 0]
        self.cpu = [0, 0, 0, 0, 0, 0]
        self._wall_base = _perf()
        self._cpu_base = clock()

    def lap(self, phase: int) -> None:
        """End ``phase`` now; the next phase starts now."""
        w = _perf()
        c = self._clock()
        self.wall[phase] += w - self._wall_base
        self.cpu[phase] += c - self._cpu_base
        self._wall_base = w
        self._cpu_base = c

    def suspend(self, phase: int) -> None:
        """The current phase is about to wait: bank its CPU so far."""
        c = self._clock()
        self.cpu[phase] += c - self._cpu_base
        self._cpu_base = c

    def resume(self) -> None:
        """Back from waiting: CPU counting restarts here."""
        self._cpu_base = self._clock()

    def add_cpu(self, phase: int, ns: int) -> None:
        """Book CPU a component did off the loop thread (thread pool, backend client)."""
        self.cpu[phase] += ns
