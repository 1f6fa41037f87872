"""The CPU the garbage collector takes on the thread that runs it: part of the loop
thread's CPU no phase counts (a collection runs inside whatever allocated last, and the
stopwatch books it there only when it falls inside a step)."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

__all__ = ("GcTimer",)


class GcTimer:
    """Sums the thread CPU of the collections run on the thread that started it, between
    :meth:`start` and :meth:`stop` (a ``gc.callbacks`` pair: two clock reads a collection)."""

    def __init__(self) -> None:
        self.cpu_ns = 0
        self.collections = 0
        self._began = 0
        self._thread = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._began = time.thread_time_ns()
        elif self._began:
            self.cpu_ns += time.thread_time_ns() - self._began
            self.collections += 1
            self._began = 0

    def start(self) -> None:
        self._thread = threading.get_ident()
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
