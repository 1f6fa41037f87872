"""Event-loop lag: how late the loop wakes a task that asked to sleep ``interval_s``.

A loop that is blocked (a synchronous call, a CPU-heavy parse) or merely
saturated wakes its sleepers late; the overshoot is the lag every other task
on the loop suffered too. The monitor keeps the last ``window`` samples in a
compact array and reports percentiles.

Example::

    monitor = LoopLagMonitor(0.05)
    monitor.start()            # inside a running loop
    ...
    print(monitor.p99_ms())
    await monitor.stop()
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Sequence

import msgspec

from podium.lifecycle import stop_task

__all__ = ("LoopLagMonitor", "LoopLagStatistics")


class LoopLagStatistics(msgspec.Struct, frozen=True):
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    interval_s: float


class LoopLagMonitor:
    """A task measuring the loop's wake-up lag every ``interval_s`` over a sliding window."""

    def __init__(self, interval_s: float = 0.05, *, window: int = 1200) -> None:
        if interval_s <= 0 or window < 1:
            raise ValueError("interval_s must be positive and window at least 1")
        self.interval_s = interval_s
        self._window = window
        self._samples: array[float] = array("d")
        self._next = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start measuring on the running loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="podium-looplag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        interval = self.interval_s
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(interval)
            self.record(max(0.0, time.perf_counter() - t0 - interval))

    def record(self, lag_s: float) -> None:
        """Add one lag sample (seconds)."""
        if len(self._samples) < self._window:
            self._samples.append(lag_s)
        else:
            self._samples[self._next] = lag_s
            self._next = (self._next + 1) % self._window

    def _quantile_ms(self, q: float) -> float:
        if not self._samples:
            return 0.0
        ordered = sorted(self._samples)
        index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))
        return ordered[index] * 1e3

    def quantiles_ms(self, percents: Sequence[float]) -> list[float]:
        """The lag at each of ``percents`` (0–100; nearest rank) over the window, in
        milliseconds: its distribution, as a profile keeps a phase's."""
        ordered = sorted(self._samples)
        if not ordered:
            return [0.0 for _ in percents]
        last = len(ordered) - 1
        return [ordered[min(last, max(0, int(p / 100 * len(ordered) + 0.999999) - 1))] * 1e3
                for p in percents]

    def p99_ms(self) -> float:
        """The 99th percentile lag over the window, in milliseconds (0 before any sample)."""
        return self._quantile_ms(0.99)

    def recent_ms(self, n: int = 5) -> float:
        """The largest of the last ``n`` samples: what a controller reacts to."""
        if not self._samples:
            return 0.0
        size = len(self._samples)
        if size < self._window:
            recent = self._samples[-n:]
        else:
            recent = array("d", (self._samples[(self._next - 1 - i) % size] for i in range(n)))
        return max(recent) * 1e3

    def statistics(self) -> LoopLagStatistics:
        return LoopLagStatistics(
            len(self._samples),
            self._quantile_ms(0.5),
            self._quantile_ms(0.99),
            max(self._samples) * 1e3 if self._samples else 0.0,
            self.interval_s,
        )
