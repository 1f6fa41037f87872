"""Per-phase wall and CPU clocks for one step, with as few clock reads as possible.

Wall time is read at every phase boundary (a cheap monotonic clock). The
thread's CPU clock, a system call, is read only at the edges of each
synchronous slice: where the step starts, where it suspends on real waiting,
where it resumes, and where it ends. A slice's CPU is split among the phases
that ran in it in proportion to their running wall time; inside one slice
nothing else runs on the loop thread, so that split is exact up to OS
preemption, and other runs' CPU never lands in this run's phases.
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
    equal to CPU time for synchronous slices unless the OS preempts the thread."""
    return time.thread_time_ns if kind == "thread" else time.perf_counter_ns


class Stopwatch:
    """Times the six phases of one step. Call :meth:`lap` at each phase end,
    :meth:`suspend`/:meth:`resume` around real waits, and :meth:`flush` before reading ``cpu``."""

    __slots__ = ("_clock", "_mark", "_phase_start", "_running", "_slice_cpu", "cpu", "wall")

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self.wall = [0, 0, 0, 0, 0, 0]
        self.cpu = [0, 0, 0, 0, 0, 0]
        self._running = [0, 0, 0, 0, 0, 0]  # running (not waiting) wall time in this slice
        now = _perf()
        self._phase_start = now
        self._mark = now
        self._slice_cpu = clock()

    def lap(self, phase: int) -> None:
        """End ``phase`` now; the next phase starts now."""
        now = _perf()
        self.wall[phase] += now - self._phase_start
        self._running[phase] += now - self._mark
        self._phase_start = self._mark = now

    def suspend(self, phase: int) -> None:
        """``phase`` is about to wait: close the current slice."""
        now = _perf()
        self._running[phase] += now - self._mark
        self._mark = now
        self._close_slice()

    def resume(self) -> None:
        """Back from waiting: a new slice starts."""
        self._mark = _perf()
        self._slice_cpu = self._clock()

    def flush_phase(self, phase: int) -> None:
        """Like :meth:`flush` when only ``phase`` ran since the last flush: no sharing out."""
        c = self._clock()
        self.cpu[phase] += c - self._slice_cpu
        self._slice_cpu = c
        self._running[phase] = 0

    def pause(self, phase: int) -> None:
        """Stop both clocks for ``phase`` (work that belongs to no phase follows)."""
        now = _perf()
        self.wall[phase] += now - self._phase_start
        self._running[phase] += now - self._mark
        self._close_slice()

    def unpause(self) -> None:
        """Start the clocks again, in the phase that was paused."""
        self._phase_start = self._mark = _perf()
        self._slice_cpu = self._clock()

    def flush(self) -> None:
        """Share out the CPU of the slice so far (so ``cpu`` is current); counting goes on."""
        self._close_slice()

    def restart(self) -> None:
        """Start the next step where this one ended, without reading the clocks again."""
        self.wall = [0, 0, 0, 0, 0, 0]
        self.cpu = [0, 0, 0, 0, 0, 0]

    def add_cpu(self, phase: int, ns: int) -> None:
        """Book CPU a component did off the loop thread (thread pool, backend client)."""
        self.cpu[phase] += ns

    def _close_slice(self) -> None:
        c = self._clock()
        spent = c - self._slice_cpu
        self._slice_cpu = c
        running = self._running
        total = sum(running)
        if total > 0:
            pairs = zip(self.cpu, running, strict=True)
            self.cpu = [have + spent * ran // total for have, ran in pairs]
            self._running = [0, 0, 0, 0, 0, 0]
