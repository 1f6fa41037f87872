"""``async with`` for everything that holds connections, threads or tasks."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Self

__all__ = ("AsyncCloseable", "stop_task")


class AsyncCloseable:
    """Gives a class ``async with`` on top of its :meth:`aclose`."""

    async def aclose(self) -> None:
        """Release what the object holds (the default holds nothing)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def stop_task(task: asyncio.Task[Any] | None, *, again_after_s: float = 1.0) -> None:
    """Cancel a background task and wait until it has stopped (None is a no-op).

    A task whose code swallowed the cancellation somewhere below it (a library that
    turns it into an error a maintenance loop then logs) is cancelled again every
    ``again_after_s`` instead of holding its process's shutdown forever. The caller's
    own cancellation propagates; an error the task ended with is raised here.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=again_after_s)
    error = None if task.cancelled() else task.exception()
    if error is not None:
        raise error
