"""Event-loop lag: how late the loop runs a callback it scheduled on time.

A ticker sleeps ``interval_s`` again and again and records how much later
than asked it woke. A blocked loop (a synchronous call on it) shows as lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array

import msgspec

from podium.engine.profile import percentile

__all__ = ("LoopLagMonitor", "LoopLagStatistics")


class LoopLagStatistics(msgspec.Struct, frozen=True):
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class LoopLagMonitor:
    """Measure the running loop's lag. Example::

    monitor = LoopLagMonitor(0.01)
    monitor.start()
    ...
    await monitor.stop()
    print(monitor.p99_ms())
    """

    def __init__(self, interval_s: float = 0.01, max_samples: int = 100_000) -> None:
        self.interval_s = interval_s
        self._samples: array[int] = array("q")
        self._max = max_samples
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick(), name="podium-looplag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _tick(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(self.interval_s)
            lag = time.perf_counter_ns() - before - interval_ns
            if len(self._samples) >= self._max:
                del self._samples[: self._max // 2]  # keep the recent half
            self._samples.append(max(0, lag))

    def p99_ms(self) -> float:
        return self.statistics().p99_ms

    def statistics(self) -> LoopLagStatistics:
        values = sorted(self._samples)
        return LoopLagStatistics(
            len(values),
            percentile(values, 50) / 1e6,
            percentile(values, 99) / 1e6,
            (values[-1] / 1e6) if values else 0.0,
        )
