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
import random
import secrets
import socket
import time
from collections.abc import Mapping
from typing import Literal

import msgspec

from podium.agent import Agent
from podium.engine.driver import Engine
from podium.errors import QueueUnavailableError, RunNotFoundError, StaleRunError
from podium.lifecycle import stop_task
from podium.queue.base import Claim, RunQueue
from podium.queue.stranded import StrandedSweep
from podium.threads.slot import TurnSlot, current_slot

__all__ = ("Worker", "WorkerStatistics")

log = logging.getLogger("podium.worker")

#: What a run whose keys vanished from the store says about why.
_VANISHED = " (evicted by Redis? its maxmemory-policy must be noeviction)"


class WorkerStatistics(msgspec.Struct, frozen=True):
    consumer: str
    active: int
    capacity: int
    completed: int
    released: int
    dead_lettered: int
    draining: bool
    lost: int = 0  # runs another worker took over (lease lost, or a stale checkpoint refused)


class Backoff:
    """Exponential backoff with full jitter, for a service that is away (Redis restarting)."""

    __slots__ = ("base", "cap", "failures")

    def __init__(self, base: float = 0.05, cap: float = 5.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next(self) -> float:
        delay = random.uniform(0, min(self.cap, self.base * 2**self.failures))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


def consumer_name() -> str:
    """A name for this worker process on the queue, unique even where hostname and PID are
    not (containers with host networking, each its process 1): ``host-pid-<6 hex>``, so
    logs still say where it runs. The queue checks ownership of runs by this name."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


#: Dead workers' names are forgotten once idle this long holding nothing (see
#: :meth:`Worker._forget_dead_consumers`; a live one forgotten is listed again by its
#: next delivery, and one holding runs is never forgotten).
CONSUMER_IDLE_S = 600.0
_CONSUMER_SWEEP_S = 60.0  # how often a worker looks for them (jittered)

#: How a drive ends (see :meth:`Worker._execute`).
_Outcome = Literal["ended", "waiting", "paused"]
_RETRY_CAP_S = 30.0  # the longest wait before a run that failed in the worker is tried again


def _restarted(times: int) -> str:
    return (
        f"the process driving it stopped {times} times before it finished (a tool that "
        "ends the process or runs it out of memory?); not driven again"
    )


class Worker:
    """Drive queued runs with ``engine``, at most ``concurrency`` at a time.

    ``agents`` maps the agent names found in queue items to agents.
    ``max_deliveries``: a run delivered this many times without finishing (its
    worker kept dying) goes to the dead-letter list instead of running again.
    ``stranded_after_s``: on a shared queue, a run stored ``queued`` this long whose
    submit was not seen (its submitter died before submitting) is submitted by the
    sweep, which looks every second.
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
        cancel_poll_s: float = 0.5,
        waiting_sweep_s: float = 5.0,
        stranded_after_s: float = 2.0,
        burst_patience_s: float = 60.0,
        failure_backoff_s: float = 1.0,
    ) -> None:
        self.queue = queue
        self.engine = engine
        self.agents = dict(agents)
        self.pool = pool
        self.concurrency = concurrency
        self.consumer = consumer or consumer_name()
        self.heartbeat_s = heartbeat_s
        self.max_deliveries = max_deliveries
        self.claim_block_s = claim_block_s
        self.cancel_poll_s = cancel_poll_s
        self.waiting_sweep_s = waiting_sweep_s
        # On a shared queue: runs stored `queued` this long that no queue delivered (their
        # submitter died between the store write and the submit) are submitted again.
        self._stranded = (
            StrandedSweep(engine.store, queue, stranded_after_s) if queue.shared else None
        )
        self._active: dict[str, tuple[Claim, asyncio.Task[None]]] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._lent = 0  # slots lent back by runs waiting for their turn on a thread
        self._draining = asyncio.Event()
        self._completed = 0
        self._released = 0
        self._dead = 0
        self._lost_runs = 0
        self._lost: set[str] = set()  # runs whose lease was lost: cancelled, never released
        self._failures: dict[str, int] = {}  # failures in this worker, on a queue without leases
        self._claim_backoff = Backoff()
        #: A burst worker whose queue has not answered for this long gives up (raises
        #: QueueUnavailableError): a batch job fails, instead of waiting for ever.
        self.burst_patience_s = burst_patience_s
        #: On a queue without leases, the wait before a run that failed in the worker (a
        #: bug) is tried again; doubled with each failure, up to 30 s.
        self.failure_backoff_s = failure_backoff_s
        self._unreachable_since: float | None = None  # time.monotonic() of the first failure
        #: Consumers of the pool idle this long holding nothing are forgotten (dead workers).
        self.consumer_idle_s = max(CONSUMER_IDLE_S, 10 * claim_block_s)
        self._next_consumer_sweep = time.monotonic() + _CONSUMER_SWEEP_S * random.random()

    async def run(self, *, burst: bool = False) -> None:
        """Claim and drive runs until :meth:`drain`.

        With ``burst``, until the pool has nothing waiting or in flight on any worker.
        """
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="podium-heartbeat")
        cancels = asyncio.create_task(self._cancel_loop(), name="podium-cancels")
        sweep = asyncio.create_task(self._sweep_loop(), name="podium-waiting-sweep")
        try:
            while not self._draining.is_set():
                await self._slots.acquire()
                if self._draining.is_set():
                    self._slots.release()
                    break
                # We hold one slot; claim as many runs as there are free slots (batched).
                holding = len(self._active) - self._lent  # runs holding a slot (ours not yet)
                claims = await self._claim(min(self.concurrency - holding, 64))
                if claims and self._draining.is_set():  # drain began while we were claiming
                    # Given back undriven, not counted: among them may be the fresh entries
                    # of runs this drain has just released (counted then).
                    for claim in claims:
                        await self._give_back(claim)
                    self._slots.release()
                    break
                if not claims:
                    self._slots.release()
                    if burst and not self._active:
                        if await self._nothing_left():
                            break
                        self._give_up_if_unreachable()
                    continue
                for i, claim in enumerate(claims):
                    if i > 0:
                        await self._slots.acquire()
                    self._start(claim)
            while self._active and not self._draining.is_set():
                await asyncio.wait([t for _, t in self._active.values()])
        finally:
            for task in (heartbeat, cancels, sweep):
                await stop_task(task)
        if not self._active:
            await self._retire()

    async def _retire(self) -> None:
        """Stopping for good holding nothing: leave no name behind in the queue (a name
        left is forgotten by another worker's sweep later: this must not fail a stop)."""
        try:
            await self.queue.retire(self.consumer, self.pool)
        except Exception as exc:
            log.info("could not remove consumer %s from the queue (%s)", self.consumer, exc)

    async def _claim(self, count: int) -> list[Claim]:
        try:
            claims = await self.queue.claim(
                self.consumer, pool=self.pool, count=count, block_s=self.claim_block_s
            )
        except (ConnectionError, OSError) as exc:  # the queue's service is away: back off
            self._note_unreachable()
            delay = self._claim_backoff.next()
            log.warning("claim failed (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
            return []
        self._claim_backoff.reset()
        self._unreachable_since = None
        return claims

    async def _nothing_left(self) -> bool:
        """Burst mode's exit test: nothing waiting, nothing in flight on any worker."""
        try:
            return await self.queue.outstanding(self.pool) == 0
        except (ConnectionError, OSError):
            self._note_unreachable()
            return False

    def _note_unreachable(self) -> None:
        """The queue did not answer: since when, if it had answered before."""
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()

    def _give_up_if_unreachable(self) -> None:
        since = self._unreachable_since
        if since is not None and time.monotonic() - since > self.burst_patience_s:
            raise QueueUnavailableError(
                f"the queue has not answered for {self.burst_patience_s:g}s; a --burst "
                "worker gives up (is Redis up, and is this its URL?)"
            )

    def _start(self, claim: Claim) -> None:
        held = self._active.get(claim.item.run_id)
        if held is not None and not held[1].done():
            # Our own lease ran out and we took the run back: keep driving it (its task
            # acks or releases the claim it finds here). A task that released the run is
            # no longer listed, so a re-delivery of that claim starts afresh below.
            self._active[claim.item.run_id] = (claim, held[1])
            self._slots.release()
            return
        task = asyncio.create_task(self._drive(claim), name=f"run:{claim.item.run_id}")
        self._active[claim.item.run_id] = (claim, task)

    def _lend(self, change: int) -> None:
        self._lent += change

    async def _drive(self, claim: Claim) -> None:
        run_id = claim.item.run_id
        slot = TurnSlot(self._slots, self._lend)
        current_slot.set(slot)  # this task's context only: lent while it waits for a turn
        released = False  # a drain's cancel landing in the release must not release again
        try:
            if claim.deliveries > self.max_deliveries:
                why = f"delivered {claim.deliveries} times without finishing"
                await self._dead_letter(claim, why)
                return
            outcome = await self._execute(claim)
            if outcome is None:
                return
            if outcome == "paused":  # at a step boundary, by a drain: the next worker resumes
                released = True  # (shielded: a cancel now does not leave it half-done)
                await asyncio.shield(self._release(self._forget(run_id, claim)))
            else:
                await self._ack(self._claim_of(claim), ended=outcome == "ended")
                self._completed += 1
                self._failures.pop(run_id, None)
        except asyncio.CancelledError:
            if run_id in self._lost:
                self._lost.discard(run_id)
            elif not released:
                await asyncio.shield(self._release(self._forget(run_id, claim)))
            raise
        except Exception as exc:  # a bug, not a crash
            if self.queue.leased:  # leave the lease to expire: redelivered, counted
                log.exception("run %s failed in the worker; it will be delivered again", run_id)
            else:  # no lease would ever give it back: retried here, counted here
                await self._retry_failed(claim, exc)
        finally:
            self._forget(run_id, claim)
            slot.release()

    async def _retry_failed(self, claim: Claim, exc: Exception) -> None:
        """A run that failed in the worker on a queue without leases (the embedded one):
        given back after a backoff, up to ``max_deliveries`` failures, then dead-lettered
        with the error (it stayed in flight, never driven again, before)."""
        run_id = claim.item.run_id
        failures = self._failures[run_id] = self._failures.get(run_id, 0) + 1
        if failures >= self.max_deliveries:
            log.exception("run %s failed in the worker %d times; dead-lettered", run_id, failures)
            self._failures.pop(run_id, None)
            await self._dead_letter(claim, f"failed in the worker {failures} times: {exc!r}")
            return
        delay = min(_RETRY_CAP_S, self.failure_backoff_s * 2 ** (failures - 1))
        log.exception("run %s failed in the worker; trying it again in %gs", run_id, delay)
        await asyncio.sleep(delay)
        await self._release(self._forget(run_id, claim))

    def _claim_of(self, claim: Claim) -> Claim:
        """The claim this task drives ``claim``'s run under now (a reclaim of our own
        lapsed lease replaces it)."""
        held = self._active.get(claim.item.run_id)
        return held[0] if held is not None and held[1] is asyncio.current_task() else claim

    def _forget(self, run_id: str, claim: Claim) -> Claim:
        """Unlist this task's run (before a release, so that a re-delivery of it starts a
        new task instead of being taken for ours); returns the claim it held."""
        held = self._active.get(run_id)
        if held is not None and held[1] is asyncio.current_task():
            del self._active[run_id]
            return held[0]
        return claim

    async def _execute(self, claim: Claim) -> _Outcome | None:
        """Drive the run: ``ended``, ``waiting`` (parked on a human), ``paused`` (by a
        drain, or overtaken too often: it goes back to the queue), or None when there
        is nothing more to do here (it had ended already, was dead-lettered, or was lost
        to another worker).

        While the store is away the run is resumed from its last checkpoint once
        it is back (backing off meanwhile). A stale write means someone else wrote
        the run: if the queue says another worker holds it now, stop driving it and
        neither ack nor release; if the lease is still ours (another process wrote
        the record, say), read the run again and resume it from its journal, or ack
        it if that write ended it.
        """
        run_id = claim.item.run_id
        agent = self.agents.get(claim.item.agent)
        admit_ns = max(0, int((claim.claimed_at - claim.item.enqueued_at) * 1e9))
        backoff = Backoff()
        stale = 0
        while True:
            try:
                record = await self.engine.store.get(run_id)
                if agent is None or record is None:
                    if agent is None:
                        served = ", ".join(sorted(self.agents)) or "none"
                        why = (
                            f"unknown agent {claim.item.agent!r}: this worker of pool "
                            f"{self.pool!r} serves {served}; give gateway and workers the "
                            "same podium.toml"
                        )
                    else:
                        why = f"run not in store{_VANISHED}"
                        self.engine.store.report_lost(run_id, "a queue entry")
                    await self._dead_letter(claim, why)
                    return None
                if record.done or record.status == "waiting":
                    # Finished before (its ack was lost, or another write ended it), or
                    # parked on a human: a decision enqueues it again.
                    await self._ack(self._claim_of(claim), ended=record.done)
                    return None
                if self._draining.is_set():
                    return "paused"
                if record.status == "running" and record.restarts >= self.max_deliveries:
                    await self._dead_letter(claim, _restarted(record.restarts))
                    return None
                if record.started_at is not None and await self._cancel_left(run_id):
                    # Asked to cancel while no live worker drove it (its worker died, or
                    # released it; or, queued again by a human's decision, the cancel came
                    # as the decision was written): end it here, before any call starts.
                    await self.engine.end_stored(record, "cancelled", "cancelled", "cancelled")
                    return "ended"
                record = await self.engine.execute(agent, record, admit_ns=admit_ns)
                # A run parked on a human leaves the queue too (no lease runs while it waits).
                if record.done:
                    return "ended"
                return "waiting" if record.status == "waiting" else "paused"
            except RunNotFoundError as exc:
                # Its record or journal vanished mid-run (evicted, deleted): it cannot be
                # resumed without repeating its calls. End it, with a reason, not a retry
                # per delivery.
                self.engine.store.report_lost(run_id, f"the worker driving it ({exc})")
                await self._dead_letter(claim, f"state lost: {exc}{_VANISHED}")
                return None
            except StaleRunError as exc:
                if await self._lease_lost(self._claim_of(claim)):
                    log.warning("run %s: another worker holds it now (%s)", run_id, exc)
                    self._lost_runs += 1
                    return None
                stale += 1
                if stale > self.max_deliveries:  # keeps being overtaken: let the queue decide
                    log.warning("run %s: overtaken %d times; releasing it", run_id, stale)
                    return "paused"
                log.warning("run %s: written elsewhere (%s); resuming it from its journal",
                            run_id, exc)
            except (ConnectionError, OSError) as exc:
                delay = backoff.next()
                log.warning("run %s: store unavailable (%s); resuming in %.2fs", run_id, exc, delay)
                await asyncio.sleep(delay)

    async def _cancel_left(self, run_id: str) -> bool:
        """Whether someone asked to cancel the run (a request left for its driver). Only a
        run started before can have one: a run never started is cancelled in the store."""
        return run_id in await self.engine.store.cancel_requests((run_id,))

    async def _lease_lost(self, claim: Claim) -> bool:
        """Whether the queue has given ``claim``'s run to another worker.

        When the queue cannot be asked, the lease counts as ours: resuming is safe,
        as the store refuses the writes of a worker that lost the run.
        """
        if claim.item.run_id in self._lost:
            return True
        try:
            lost = await self.queue.heartbeat(self.consumer, [claim])
        except (ConnectionError, OSError):
            return False
        return bool(lost)

    async def _ack(self, claim: Claim, attempts: int = 8, *, ended: bool = True) -> None:
        backoff = Backoff()
        for attempt in range(attempts):
            try:
                await self.queue.ack(claim, ended=ended)
                return
            except (ConnectionError, OSError) as exc:
                if attempt == attempts - 1:  # the run is finished in the store: a redelivery
                    log.warning("ack of %s failed (%s); it will be redelivered", claim.receipt, exc)
                    return  # finds it done and acks it then
                await asyncio.sleep(backoff.next())

    async def _dead_letter(self, claim: Claim, reason: str) -> None:
        for _ in range(3):  # a write from elsewhere meanwhile: read the run again
            record = await self.engine.store.get(claim.item.run_id)
            if record is not None and record.done:  # it did finish; only its ack was lost
                await self._ack(claim)
                return
            if record is None:
                break
            try:
                await self.engine.end_stored(record, "failed", "dead_letter", reason)
                break
            except StaleRunError:
                if await self._lease_lost(claim):  # another worker has it: leave it to them
                    return
        else:
            return  # kept being overtaken: the lease runs out and the queue decides again
        # (its unfinished child runs ended with it: Engine.end_stored ends them)
        await self.queue.dead_letter(claim, reason)
        self._dead += 1
        log.error("run %s dead-lettered: %s", claim.item.run_id, reason)

    async def _release(self, claim: Claim) -> None:
        """Hand a run this worker drove back to the queue (counted in ``released``)."""
        self._released += 1
        await self._give_back(claim)

    async def _give_back(self, claim: Claim) -> None:
        with contextlib.suppress(Exception):
            await self.queue.release(claim)

    async def _cancel_loop(self) -> None:
        """Cancel the runs someone asked to cancel (a gateway on another machine, say).

        One store read per ``cancel_poll_s`` while runs are active; a cancelled run ends
        ``cancelled`` at its next await point and is acked like any finished run.
        """
        while True:
            await asyncio.sleep(self.cancel_poll_s)
            if not self._active:
                continue
            try:
                wanted = await self.engine.store.cancel_requests(list(self._active))
            except Exception as exc:  # a maintenance loop must not take the worker down
                log.warning("reading cancel requests failed (%s)", exc)
                continue
            for run_id in wanted:
                self.engine.cancel(run_id)

    async def _sweep_loop(self) -> None:
        """End the waiting runs past their deadline: no worker holds them, so every worker
        looks every ``waiting_sweep_s`` (one indexed store read; the store's fencing lets
        one of several sweeping workers write each end), and asks the store whether it
        takes writes then (logged when that changes, see ``podium.store.redis_health``).
        On a shared queue, also submit the runs stranded outside it, every second (see
        :mod:`podium.queue.stranded`; one indexed read, and each run is queued once
        however many workers find it)."""
        tick = self.waiting_sweep_s
        if self._stranded is not None:
            tick = min(tick, self._stranded.every_s)
        next_waiting = time.monotonic() + self.waiting_sweep_s
        while True:
            await asyncio.sleep(tick)
            if time.monotonic() >= next_waiting:
                next_waiting = time.monotonic() + self.waiting_sweep_s
                await self._sweep_waiting()
            if self._stranded is not None:
                try:
                    await self._stranded.run_once()
                except Exception as exc:  # a maintenance loop must not take the worker down
                    log.warning("sweeping stranded runs failed (%s)", exc)
            await self._forget_dead_consumers()

    async def _forget_dead_consumers(self) -> None:
        """Every minute or so, forget the pool's consumers that died holding nothing: each
        worker start is a new name, and a fleet restarts its workers thousands of times."""
        if time.monotonic() < self._next_consumer_sweep:
            return
        self._next_consumer_sweep = time.monotonic() + _CONSUMER_SWEEP_S * (
            0.75 + random.random() / 2
        )
        try:
            gone = await self.queue.forget_idle_consumers(self.pool, self.consumer_idle_s)
        except Exception as exc:  # a maintenance loop must not take the worker down
            log.warning("forgetting dead consumers failed (%s)", exc)
            return
        if gone:
            log.info("forgot %d dead consumer(s) of pool %r", gone, self.pool)

    async def _sweep_waiting(self) -> None:
        try:
            ended = await self.engine.sweep_waiting()
        except Exception as exc:  # a maintenance loop must not take the worker down
            log.warning("sweeping waiting runs failed (%s)", exc)
        else:
            for record in ended:
                log.warning("run %s failed: %s", record.run_id, record.reason)
        with contextlib.suppress(Exception):  # logs a change itself; readiness reports it
            await self.engine.store.health()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if self._active:
                try:
                    lost = await self.queue.heartbeat(
                        self.consumer, [c for c, _ in self._active.values()]
                    )
                except (ConnectionError, OSError) as exc:
                    log.warning("heartbeat failed (%s)", exc)
                    continue
                except Exception:  # a maintenance loop must not take the worker down
                    log.exception("heartbeat failed")
                    continue
                for claim in lost or ():
                    held = self._active.get(claim.item.run_id)
                    if held is not None and held[0].receipt == claim.receipt:
                        log.warning("run %s: lease lost to another worker", claim.item.run_id)
                        self._lost.add(claim.item.run_id)
                        self._lost_runs += 1
                        held[1].cancel()

    async def drain(self, grace_s: float = 30.0, *, finish_s: float = 0.0) -> None:
        """Stop claiming; give running steps ``grace_s`` to finish and checkpoint.

        Each run stops at its next step boundary and is released; a run whose
        step is still going when the grace ends is cancelled mid-step and
        released too. Either way its last checkpoint is intact and another
        worker resumes it there (re-running only the calls that had no outcome,
        under the same idempotency keys).

        ``finish_s``: first, the runs go on that long, and those that end meanwhile end
        as usual (an embedded server's: nobody else would drive them before its restart,
        and their clients wait for their ends); only then do the others pause.
        """
        self._draining.set()
        if finish_s > 0 and self._active:
            await asyncio.wait([t for _, t in self._active.values()], timeout=finish_s)
        for run_id in self._active:
            self.engine.pause(run_id)  # stop after the step in progress is checkpointed
        tasks = [t for _, t in self._active.values()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await self._retire()

    def statistics(self) -> WorkerStatistics:
        return WorkerStatistics(
            self.consumer,
            len(self._active),
            self.concurrency,
            self._completed,
            self._released,
            self._dead,
            self._draining.is_set(),
            self._lost_runs,
        )
