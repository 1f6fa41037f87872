"""``async with`` for everything that holds connections, threads or tasks."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ("AsyncCloseable",)


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
