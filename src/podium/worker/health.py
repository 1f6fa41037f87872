"""A worker's liveness and readiness, as ``/livez`` and ``/readyz`` on its metrics port.

Kubernetes restarts a pod whose liveness probe fails, and stops sending work to (or
counting as available) one whose readiness probe fails. So the two ask different things:

- **live**: the process answers and its event loop runs (a loop held for
  ``stall_s`` is a hang a restart cures). Never Redis: an outage of Redis must not
  restart every worker of the fleet, which would only add cold starts to it.
- **ready**: the worker can do its work now: Redis takes writes (a probe write, see
  :mod:`podium.store.redis_health`), the queue answers, and the worker is not draining.

The endpoint serves from its own threads; they ask the worker's loop for readiness
(bounded by ``timeout_s``: a loop that does not answer is not ready either).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING

from podium.lifecycle import stop_task

if TYPE_CHECKING:
    from podium.queue.base import RunQueue
    from podium.store.base import RunStore
    from podium.worker.worker import Worker

__all__ = ("Checks", "WorkerHealth")

#: ``{component: "ok" | why not}``, as the gateway's ``/readyz`` reports them.
Checks = dict[str, str]


class WorkerHealth:
    """What ``/livez`` and ``/readyz`` of one worker process answer; :meth:`live` and
    :meth:`ready` are called from the endpoint's threads."""

    def __init__(
        self,
        worker: Worker,
        store: RunStore,
        queue: RunQueue,
        pool: str,
        *,
        timeout_s: float = 2.0,
        stall_s: float = 60.0,
    ) -> None:
        self.worker = worker
        self.store = store
        self.queue = queue
        self.pool = pool
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick = time.monotonic()
        self._ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        """On the worker's loop: from now on the loop's heartbeat is watched."""
        self._loop = asyncio.get_running_loop()
        self._tick = time.monotonic()
        self._ticker = self._loop.create_task(self._beat(), name="podium-liveness")

    async def stop(self) -> None:
        if self._ticker is not None:
            await stop_task(self._ticker)

    async def _beat(self) -> None:
        while True:
            self._tick = time.monotonic()
            await asyncio.sleep(1.0)

    # -- asked from the endpoint's threads ------------------------------------------------

    def live(self) -> tuple[bool, Checks]:
        held = time.monotonic() - self._tick
        if held > self.stall_s:
            return False, {"loop": f"the event loop has not run for {held:.0f}s"}
        return True, {"loop": "ok"}

    def ready(self) -> tuple[bool, Checks]:
        loop = self._loop
        if loop is None or loop.is_closed():
            return False, {"worker": "not started"}
        future = asyncio.run_coroutine_threadsafe(self.readiness(), loop)
        try:
            checks = future.result(self.timeout_s)
        except TimeoutError:
            future.cancel()
            return False, {"loop": f"the event loop did not answer within {self.timeout_s:g}s"}
        except Exception as exc:  # the loop stopped under us: a worker shutting down
            return False, {"worker": f"{type(exc).__name__}: {exc}"[:300]}
        return all(v == "ok" for v in checks.values()), checks

    # -- on the worker's loop -------------------------------------------------------------

    async def readiness(self) -> Checks:
        """``{component: "ok" | reason}`` for the store (it takes writes), the queue (it
        answers) and the worker (not draining)."""
        checks: Checks = {}
        limit = self.timeout_s * 0.75  # under the thread's wait: a reason, not a timeout

        async def check(name: str, probe: Coroutine[object, object, str | None]) -> None:
            try:
                async with asyncio.timeout(limit):
                    problem = await probe
                checks[name] = "ok" if problem is None else problem[:300]
            except TimeoutError:
                checks[name] = f"no answer within {limit:g}s"
            except Exception as exc:  # readiness reports every failure, whatever its kind
                checks[name] = f"{type(exc).__name__}: {exc}"[:300]

        async def queue_answers() -> str | None:
            await self.queue.depth(self.pool)
            return None

        await asyncio.gather(check("store", self.store.health()),
                             check("queue", queue_answers()))
        checks["worker"] = "draining" if self.worker.statistics().draining else "ok"
        return checks
