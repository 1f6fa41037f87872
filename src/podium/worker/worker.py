"""A worker: claims queued runs and drives many of them at once on one event loop.

The same class serves the embedded mode (inside the gateway, on a
:class:`~podium.queue.local.LocalQueue`) and ``podium worker`` processes on
Redis. It heartbeats the leases of the runs it drives, acks each run when it
reaches a terminal status, and on :meth:`drain` stops claiming, lets running
steps finish within a grace period, and releases the rest for other workers
to resume from their checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping

import msgspec

from podium.agent import Agent
from podium.engine.driver import Engine
from podium.queue.base import Claim, RunQueue

__all__ = ("Worker", "WorkerStatistics")

log = logging.getLogger("podium.worker")


class WorkerStatistics(msgspec.Struct, frozen=True):
    consumer: str
    active: int
    capacity: int
    completed: int
    released: int
    dead_lettered: int
    draining: bool


class Worker:
    """Drive queued runs with ``engine``, at most ``concurrency`` at a time.

    ``agents`` maps the agent names found in queue items to agents.
    ``max_deliveries``: a run delivered this many times without finishing (its
    worker kept dying) goes to the dead-letter list instead of running again.
    """

    def __init__(
        self,
        queue: RunQueue,
        engine: Engine,
        agents: Mapping[str, Agent],
        *,
        pool: str = "default",
        concurrency: int = 256,
        consumer: str | None = None,
        heartbeat_s: float = 5.0,
        max_deliveries: int = 3,
        claim_block_s: float = 1.0,
    ) -> None:
        self.queue = queue
        self.engine = engine
        self.agents = dict(agents)
        self.pool = pool
        self.concurrency = concurrency
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.heartbeat_s = heartbeat_s
        self.max_deliveries = max_deliveries
        self.claim_block_s = claim_block_s
        self._active: dict[str, tuple[Claim, asyncio.Task[None]]] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._draining = asyncio.Event()
        self._completed = 0
        self._released = 0
        self._dead = 0

    async def run(self, *, burst: bool = False) -> None:
        """Claim and drive runs until :meth:`drain` (with ``burst``: until the queue is empty)."""
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="podium-heartbeat")
        try:
            while not self._draining.is_set():
                await self._slots.acquire()
                if self._draining.is_set():
                    self._slots.release()
                    break
                # We hold one slot; claim as many runs as there are free slots (batched).
                claims = await self._claim(min(self.concurrency - len(self._active), 64))
                if not claims:
                    self._slots.release()
                    if burst and not self._active and await self.queue.depth(self.pool) == 0:
                        break
                    continue
                for i, claim in enumerate(claims):
                    if i > 0:
                        await self._slots.acquire()
                    self._start(claim)
            while self._active and not self._draining.is_set():
                await asyncio.wait([t for _, t in self._active.values()])
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _claim(self, count: int) -> list[Claim]:
        try:
            return await self.queue.claim(
                self.consumer, pool=self.pool, count=count, block_s=self.claim_block_s
            )
        except (ConnectionError, OSError) as exc:  # the queue's service is away: back off
            log.warning("claim failed (%s); retrying", exc)
            await asyncio.sleep(0.5)
            return []

    def _start(self, claim: Claim) -> None:
        task = asyncio.create_task(self._drive(claim), name=f"run:{claim.item.run_id}")
        self._active[claim.item.run_id] = (claim, task)

    async def _drive(self, claim: Claim) -> None:
        run_id = claim.item.run_id
        try:
            if claim.deliveries > self.max_deliveries:
                await self._dead_letter(
                    claim, f"delivered {claim.deliveries} times without finishing"
                )
                return
            agent = self.agents.get(claim.item.agent)
            record = await self.engine.store.get(run_id)
            if agent is None or record is None:
                why = f"unknown agent {claim.item.agent!r}" if agent is None else "run not in store"
                await self._dead_letter(claim, why)
                return
            admit_ns = max(0, int((claim.claimed_at - claim.item.enqueued_at) * 1e9))
            await self.engine.execute(agent, record, admit_ns=admit_ns)
            await self.queue.ack(claim)
            self._completed += 1
        except asyncio.CancelledError:
            await asyncio.shield(self._release(claim))
            raise
        finally:
            self._active.pop(run_id, None)
            self._slots.release()

    async def _dead_letter(self, claim: Claim, reason: str) -> None:
        self._dead += 1
        record = await self.engine.store.get(claim.item.run_id)
        if record is not None and not record.done:
            record.status = "failed"
            record.reason = "dead_letter"
            record.error = reason
            record.finished_at = time.time()
            await self.engine.store.update(record)
        await self.queue.dead_letter(claim, reason)

    async def _release(self, claim: Claim) -> None:
        self._released += 1
        with contextlib.suppress(Exception):
            await self.queue.release(claim)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if self._active:
                try:
                    await self.queue.heartbeat(self.consumer, [c for c, _ in self._active.values()])
                except (ConnectionError, OSError) as exc:
                    log.warning("heartbeat failed (%s)", exc)

    async def drain(self, grace_s: float = 30.0) -> None:
        """Stop claiming; give running runs ``grace_s`` to finish, then release the rest.

        A released run's last checkpoint is intact; another worker resumes it there.
        """
        self._draining.set()
        tasks = [t for _, t in self._active.values()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    def statistics(self) -> WorkerStatistics:
        return WorkerStatistics(
            self.consumer,
            len(self._active),
            self.concurrency,
            self._completed,
            self._released,
            self._dead,
            self._draining.is_set(),
        )
