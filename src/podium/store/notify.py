"""Wake the readers of a run's journal when entries are appended (one process)."""

from __future__ import annotations

import asyncio

__all__ = ("JournalNotifier",)


class JournalNotifier:
    """Futures per run, resolved on append. Costs nothing while nobody waits."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        #: Futures of the readers waiting, by run id (empty: an append notifies nobody).
        self.waiters: dict[str, list[asyncio.Future[None]]] = {}

    def notify(self, run_id: str) -> None:
        if not self.waiters:
            return
        for fut in self.waiters.pop(run_id, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, run_id: str, timeout: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run_id, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            waiters = self.waiters.get(run_id)
            if waiters and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self.waiters[run_id]
