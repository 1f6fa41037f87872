"""Whether a :class:`~podium.gateway.service.Gateway` can serve: its store, its queue and
each agent's model asked at once (``/readyz``), the store watched between asks, and the
queue's figures refreshed for a scrape. A mixin of the gateway: its constructor sets what
these read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from podium.errors import StoreUnavailableError
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.served import ServedAgent
from podium.queue.base import RunQueue
from podium.store.base import RunStore

__all__ = ("CHANNEL_ERRORS", "STORE_WATCH_S", "GatewayReadiness")

_READY_TIMEOUT_S = 2.0
STORE_WATCH_S = 5.0  # how often the store is asked whether it takes writes, unasked
CHANNEL_ERRORS: tuple[type[BaseException], ...] = (*UNAVAILABLE, OSError)
_QUEUE_READ_S = 1.0  # a scrape's read of the queue's sizes waits this long at most


class GatewayReadiness:
    """``readiness()`` and what keeps its answers fresh."""

    store: RunStore
    queue: RunQueue
    pools: list[str]
    agents: Mapping[str, ServedAgent]

    async def _store_ready(self) -> None:
        """A read answers, and the store knows of nothing that stops writes (a full disk,
        its file deleted under it): a read alone said ready on both."""
        await self.store.list(limit=1)
        problem = await self.store.health()  # a probe write: a full Redis still reads
        if problem is not None:
            raise StoreUnavailableError(problem)

    async def refresh_queue_figures(self) -> None:
        """Read the queue's sizes now (a scrape's): its waiting and in-flight figures are as
        of the last read, the last admission's, and stayed stale (7 in flight for minutes
        on an empty queue). A queue that does not answer within a second leaves them as
        they were: a scrape during an outage still answers."""
        with contextlib.suppress(TimeoutError, *CHANNEL_ERRORS):
            async with asyncio.timeout(_QUEUE_READ_S):
                await asyncio.gather(*(self.queue.depth(pool) for pool in self.pools))

    async def _watch_store(self) -> None:
        while True:
            await asyncio.sleep(STORE_WATCH_S)
            with contextlib.suppress(Exception):  # logged by the store; readiness reports it
                await self.store.health()

    async def readiness(self) -> dict[str, str]:
        """``{component: "ok" | reason}`` for the store, the queue and each agent's model."""
        checks: dict[str, str] = {}

        async def check(
            name: str, probe: asyncio.Future[object] | object, of: object = None
        ) -> None:
            try:
                async with asyncio.timeout(_READY_TIMEOUT_S):
                    if asyncio.iscoroutine(probe) or isinstance(probe, asyncio.Future):
                        result = await probe
                        if result is False:  # a health probe that answered "not healthy"
                            why = getattr(of, "health_error", None)  # what it saw, if it says
                            checks[name] = f"unhealthy: {why}"[:300] if why else "unhealthy"
                            return
                checks[name] = "ok"
            except TimeoutError:
                checks[name] = f"no answer within {_READY_TIMEOUT_S:g}s"
            except Exception as exc:  # readiness reports every failure, whatever its kind
                checks[name] = f"{type(exc).__name__}: {exc}"[:300] or "error"

        probes = [check("store", self._store_ready()),
                  check("queue", self.queue.depth(self.pools[0]))]
        for served in self.agents.values():
            model = served.agent.model
            probe = getattr(model, "health", None)
            probes.append(
                check(f"model:{served.name}", probe() if callable(probe) else None, model)
            )
        # At once: a probe (a load balancer's, often with a 1 s timeout) waits for the
        # slowest check, not for the sum of them.
        await asyncio.gather(*probes)
        order = ["store", "queue", *(f"model:{served.name}" for served in self.agents.values())]
        return {name: checks[name] for name in order}
