"""The thread pool for synchronous tools, which stuck calls cannot starve.

A thread cannot be stopped from outside. A sync tool that passes its timeout
(or whose run passed its deadline) is left running — *abandoned* — and with a
fixed pool a few such calls would hold every thread of the process, so every
other sync tool would wait behind them. Here an abandoned call does not count
against the pool's size: the pool starts a thread in its place, up to
``max_abandoned`` of them at once; when the stuck call returns at last its
thread serves the pool again (and the extra one retires when idle).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ("ToolThreads",)

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class ToolThreads(Executor):
    """``size`` threads for sync tools, plus one for each abandoned call (at most
    ``max_abandoned``). ``abandoned`` counts the calls left running now,
    ``abandoned_total`` all there ever were."""

    def __init__(
        self,
        size: int,
        *,
        max_abandoned: int = 64,
        name: str = "podium-tool",
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        if size < 1 or max_abandoned < 0:
            raise ValueError("size must be at least 1 and max_abandoned not negative")
        self.size = size
        self.max_abandoned = max_abandoned
        self.name = name
        self._initializer = initializer
        self._initargs = initargs
        self.abandoned = 0
        self.abandoned_total = 0
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._queued = 0
        self._shutdown = False
        self._stuck: set[Future[Any]] = set()

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if kwargs:
            raise TypeError("ToolThreads.submit takes positional arguments only")
        future: Future[T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._queued += 1
            start = self._queued > self._idle and self._threads < self._capacity()
            if start:
                self._threads += 1
        self._work.put((future, fn, args))
        if start:
            threading.Thread(
                target=self._serve, name=f"{self.name}-{id(future):x}", daemon=True
            ).start()
        return future

    def abandon(self, future: Future[Any]) -> None:
        """The caller stopped waiting for ``future`` (timeout, cancel): if its call is still
        running, let the pool replace its thread until it returns."""
        if future.cancel():  # not started yet: it never will
            return
        with self._lock:
            if future.done() or future in self._stuck or self.abandoned >= self.max_abandoned:
                return
            self._stuck.add(future)
            self.abandoned += 1
            self.abandoned_total += 1
            start = self._queued > self._idle and self._threads < self._capacity()
            if start:
                self._threads += 1
        future.add_done_callback(self._returned)
        if start:
            threading.Thread(target=self._serve, name=f"{self.name}-x", daemon=True).start()

    def _returned(self, future: Future[Any]) -> None:
        with self._lock:
            if future in self._stuck:
                self._stuck.discard(future)
                self.abandoned -= 1

    def _capacity(self) -> int:
        return self.size + self.abandoned

    def _serve(self) -> None:
        if self._initializer is not None:
            self._initializer(*self._initargs)
        while True:
            with self._lock:
                if self._threads > self._capacity() and self._queued == 0:
                    self._threads -= 1  # an extra thread whose stuck call has returned
                    return
                self._idle += 1
            work = self._work.get()
            with self._lock:
                self._idle -= 1
                if work is not None:
                    self._queued -= 1
            if work is None:
                with self._lock:
                    self._threads -= 1
                return
            future, fn, args = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                value = fn(*args)
            except BaseException as exc:  # handed to the awaiting caller, like any executor
                future.set_exception(exc)
            else:
                future.set_result(value)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = self._threads
        if cancel_futures:
            with contextlib.suppress(queue.Empty):
                while True:
                    work = self._work.get_nowait()
                    if work is not None:
                        work[0].cancel()
                        with self._lock:
                            self._queued -= 1
        for _ in range(threads):
            self._work.put(None)  # a stuck thread takes its stop when its call returns
