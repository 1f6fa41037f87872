"""Run a coroutine's first slice inline, and continue it later only if it suspends.

Most tool calls in a busy agent either finish without ever suspending (cache
hits, pure functions) or suspend on I/O. Starting them inline, as Python
3.12's eager tasks do, means the first kind costs no timer, no task and no
loop iteration, and its CPU time can be measured exactly, because nothing
else ran in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ("Continuation", "start_eagerly", "with_deadline")

T = TypeVar("T")

_NOT_DONE: Any = object()


class Continuation(Generic[T]):
    """Awaitable that drives a coroutine which already yielded ``pending`` once."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, T], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        pending = self._pending
        while True:
            try:
                value = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and errors go into the coroutine
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
                continue
            try:
                pending = coro.send(value)
            except StopIteration as stop:
                done: T = stop.value
                return done

    def close(self) -> None:
        self._coro.close()


def start_eagerly(coro: Coroutine[Any, Any, T]) -> tuple[T, None] | tuple[Any, Continuation[T]]:
    """Run ``coro`` until it first suspends.

    Returns ``(result, None)`` if it finished, else ``(_, continuation)``: await
    the continuation to drive the rest. Exceptions from the first slice propagate.
    """
    try:
        pending = coro.send(None)
    except StopIteration as stop:
        return stop.value, None
    return _NOT_DONE, Continuation(coro, pending)


class _Deadline:
    """Cancels ``task`` at ``when`` unless disarmed first; remembers whether it fired."""

    __slots__ = ("fired", "handle", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], when: float):
        self.task = task
        self.fired = False
        self.handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.fired = True
        self.task.cancel()


async def with_deadline(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``, raising ``TimeoutError`` after ``timeout`` seconds.

    The same contract as ``asyncio.timeout`` for one await, at a third of its cost
    (one timer handle, no context manager): it matters on the path every
    waiting tool call takes.
    """
    if timeout is None:
        return await awaitable
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - always inside a task in practice
        async with asyncio.timeout(timeout):
            return await awaitable
    deadline = _Deadline(loop, task, loop.time() + timeout)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if deadline.fired and task.uncancel() == 0:
            raise TimeoutError from None
        raise
    finally:
        deadline.handle.cancel()
