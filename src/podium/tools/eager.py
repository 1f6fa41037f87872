"""Run a coroutine's first slice inline, and continue it later only if it suspends.

Most tool calls in a busy agent either finish without ever suspending (cache
hits, pure functions) or suspend on I/O. Starting them inline, as Python
3.12's eager tasks do, means the first kind costs no timer, no task and no
loop iteration, and its CPU time can be measured exactly, because nothing
else ran in between.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ("Continuation", "start_eagerly")

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

