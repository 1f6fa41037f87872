"""Timeouts for the awaits every waiting tool call makes, at the least cost per call.

``asyncio.timeout`` costs a context manager and a timer handle per await (about
9 µs here); a timer handle alone about 3 µs, plus a place in the loop's heap
that is only cleaned up later. With thousands of calls in flight and a default
timeout of 30 s, almost none of those timers ever fires. So long timeouts go
to a :class:`DeadlineWheel`: calls with the same timeout expire in the order
they started, so each timeout value keeps a FIFO that one ticker per loop
sweeps every ``resolution_s`` — registering a deadline is an append. Short
timeouts, where a tick's lateness would matter, keep an exact timer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable
from typing import Any, TypeVar

import msgspec

__all__ = ("DeadlineWheel", "ToolTimeout", "arm_deadline", "with_deadline")


class ToolTimeout(TimeoutError):
    """The tool's own timeout fired (``ToolPolicy.timeout_s``): told apart from a
    ``TimeoutError`` raised inside the tool (an HTTP request's, the egress policy's), so
    that the error the model reads names the timeout that fired."""

T = TypeVar("T")

#: Timeouts at least this long go to the wheel (late by at most 5 % of them).
WHEEL_MIN_TIMEOUT_S = 1.0


# gc=False: thousands are armed at once and the collector need not scan them. The cycle
# task → frame → entry → task is broken by ``disarm`` (or the firing) when the wait ends.
class _Entry(msgspec.Struct, gc=False):
    task: Any  # asyncio.Task[Any] | None
    when: float
    fired: bool = False

    def fire(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            self.fired = True
            task.cancel()

    def disarm(self) -> None:
        self.task = None  # the wheel drops the entry when it reaches it


class DeadlineWheel:
    """Coarse deadlines on one loop: one FIFO per timeout value, one ticker."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution_s: float = 0.05) -> None:
        self.loop = loop
        self.resolution_s = resolution_s
        self._queues: dict[float, deque[_Entry]] = {}
        self._ticker: asyncio.TimerHandle | None = None

    def arm(self, task: asyncio.Task[Any], timeout: float) -> _Entry:
        entry = _Entry(task, self.loop.time() + timeout)
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = deque()
        queue.append(entry)
        if self._ticker is None:
            self._ticker = self.loop.call_later(self.resolution_s, self._tick)
        return entry

    def _tick(self) -> None:
        now = self.loop.time()
        for timeout, queue in list(self._queues.items()):
            while queue and (queue[0].task is None or queue[0].when <= now):
                queue.popleft().fire()
            if not queue:
                del self._queues[timeout]
        # Sleep while nothing is armed: an idle process wakes for nothing.
        self._ticker = self.loop.call_later(self.resolution_s, self._tick) if self._queues else None


class _Timer:
    __slots__ = ("fired", "handle", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], timeout: float):
        self.task: asyncio.Task[Any] | None = task
        self.fired = False
        self.handle = loop.call_later(timeout, self.fire)

    def fire(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            self.fired = True
            task.cancel()

    def disarm(self) -> None:
        self.task = None
        self.handle.cancel()


_wheels: dict[asyncio.AbstractEventLoop, DeadlineWheel] = {}


def _wheel(loop: asyncio.AbstractEventLoop) -> DeadlineWheel:
    wheel = _wheels.get(loop)
    if wheel is None:
        for old in [old for old in _wheels if old.is_closed()]:
            del _wheels[old]
        wheel = _wheels[loop] = DeadlineWheel(loop)
    return wheel


def arm_deadline(task: asyncio.Task[Any], timeout: float) -> _Entry | _Timer:
    """Cancel ``task`` after ``timeout`` seconds unless disarmed first; ``.fired`` then says
    the cancellation was this deadline's (the caller un-cancels the task and handles it)."""
    loop = task.get_loop()  # not get_running_loop(): on 3.11 that is a getpid() system call
    if timeout >= WHEEL_MIN_TIMEOUT_S:
        return _wheel(loop).arm(task, timeout)
    return _Timer(loop, task, timeout)


async def with_deadline(
    awaitable: Awaitable[T], timeout: float | None, task: asyncio.Task[Any] | None = None
) -> T:
    """``await awaitable``, raising ``TimeoutError`` after ``timeout`` seconds.

    The contract of ``asyncio.timeout`` around one await: the task is cancelled
    at the deadline and the cancellation becomes ``TimeoutError``; a cancellation
    from elsewhere stays a cancellation. ``task`` is the current task when the
    caller knows it (finding it costs a system call on 3.11).
    """
    if timeout is None:
        return await awaitable
    if task is None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always inside a task in practice
            try:
                async with asyncio.timeout(timeout):
                    return await awaitable
            except TimeoutError as exc:
                raise ToolTimeout from exc
    deadline = arm_deadline(task, timeout)
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if deadline.fired and task.uncancel() == 0:
            raise ToolTimeout from None
        raise
    except BaseException:
        if deadline.fired:  # the awaitable caught the deadline's cancellation, then failed
            task.uncancel()
        raise
    else:
        if deadline.fired:  # it caught the deadline's cancellation and went on (as
            task.uncancel()  # asyncio.timeout does: the task is not left cancelling)
        return result
    finally:
        deadline.task = None  # disarmed; the wheel drops the entry when it reaches it
        if isinstance(deadline, _Timer):
            deadline.handle.cancel()
