"""Run a coroutine's first slice inline, and continue it later only if it suspends.

Most tool calls in a busy agent either finish without ever suspending (cache
hits, pure functions) or suspend on I/O. Starting them inline, as Python
3.12's eager tasks do, means the first kind costs no timer, no task and no
loop iteration, and its CPU time can be measured exactly, because nothing
else ran in between.

The second kind goes on through :func:`continuation`: one generator that hands the
first awaited future to the task and then drives the coroutine to its end —
the fewest objects a waiting call can hold (the collector scans each one).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar, cast

__all__ = ("continuation", "first_slice", "own_exit", "start_eagerly")

T = TypeVar("T")

_NOT_DONE: Any = object()


def own_exit(exc: GeneratorExit) -> RuntimeError:
    """What a ``GeneratorExit`` that a coroutine raised of its own (not from being closed)
    becomes: a ``RuntimeError``, as Python makes a coroutine's ``StopIteration`` one
    (PEP 479), so that it cannot pass for the closing of whatever awaits the coroutine."""
    return RuntimeError(f"coroutine raised GeneratorExit({exc})")


def _resume(coro: Coroutine[Any, Any, T], pending: Any) -> Generator[Any, Any, T]:
    try:
        while True:
            try:
                sent = yield pending
            except GeneratorExit:  # this generator is being closed: so is the coroutine
                coro.close()
                raise
            except BaseException as exc:  # cancellation and errors go into the coroutine
                try:
                    pending = coro.throw(exc)
                except GeneratorExit as own:
                    raise own_exit(own) from own
            else:
                try:
                    pending = coro.send(sent)
                except GeneratorExit as own:
                    raise own_exit(own) from own
    except StopIteration as stop:  # caught here, inside the generator (PEP 479)
        result: T = stop.value
        return result


_resume_coroutine = types.coroutine(_resume)


def _first(coro: Coroutine[Any, Any, Any]) -> Generator[Any, Any, None]:
    yield (yield from coro)  # type: ignore[misc]


first_slice = cast(
    "Callable[[Coroutine[Any, Any, Any]], types.GeneratorType[Any, Any, None]]",
    types.coroutine(_first),
)
"""``g = first_slice(coro)``, then ``out = next(g)``: ``coro``'s first slice, with no
StopIteration for a coroutine that finishes in it (``yield from`` takes its value
without one). ``g.gi_yieldfrom is None`` then: ``out`` is the coroutine's value, and
``next(g, None)`` ends ``g`` (it returns None: no exception either). Else ``out`` is what
the coroutine awaits, and ``g`` drives it on (a ``send`` or ``throw`` goes into it, a
``close`` closes it) until it yields the value, as above."""


def continuation(coro: Coroutine[Any, Any, T], pending: Any) -> Awaitable[T]:
    """An awaitable that continues ``coro``, which already yielded ``pending`` once."""
    return _resume_coroutine(coro, pending)


def start_eagerly(coro: Coroutine[Any, Any, T]) -> tuple[T, None] | tuple[Any, Awaitable[T]]:
    """Run ``coro`` until it first suspends.

    Returns ``(result, None)`` if it finished, else ``(_, rest)``: await ``rest``
    to drive the coroutine to its end. Exceptions from the first slice propagate.
    """
    try:
        pending = coro.send(None)
    except StopIteration as stop:
        return stop.value, None
    except GeneratorExit as own:
        raise own_exit(own) from own
    return _NOT_DONE, continuation(coro, pending)
