"""``async with`` for everything that holds connections, threads or tasks."""

from __future__ import annotations

import asyncio
import contextlib
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


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has stopped (None is a no-op)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
