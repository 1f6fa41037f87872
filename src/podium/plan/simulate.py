"""A discrete-event simulation of one worker process: runs arriving at random, taking turns
on the CPU between their waits.

A worker process is one event loop: one core's worth of CPU, served in turn (first come,
first served: asyncio's ready queue). A run is a sequence of *segments* alternating CPU
and waiting: a burst of CPU (assemble the prompt, send the call), the model's reply, a
burst (parse, dispatch the tools), the tools, a burst (merge, checkpoint, assemble the
next prompt), and so on. Waits overlap freely (any number of runs wait on the model at
once); bursts queue for the loop. The worker drives at most ``concurrency`` runs; more wait
for admission, as the queue holds them for a free slot.

The waits are drawn from the measured distributions (:class:`~podium.plan.distribution.
Distribution`), so a long tail in the model's latency shows in the run's p99 as it would
in production. Arrivals are Poisson (an open system: users do not wait for each other).
The event list is a binary heap; a run costs about thirty events.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import msgspec

from podium.engine.profile import percentile

__all__ = ("ClassResult", "HostStalls", "LoopWakes", "SimResult", "Workload", "simulate")


class Workload(Protocol):
    """What one kind of run does, drawn anew for each run."""

    def segments(self, rng: random.Random) -> tuple[list[float], frozenset[int]]:
        """Seconds: even indexes are CPU bursts, odd ones waits (the run starts and ends
        with a burst, so the length is odd); and the indexes of the waits that are model
        calls (counted as calls in flight)."""
        ...


class ClassResult(msgspec.Struct, frozen=True):
    """Run latency (seconds, arrival to end) of one kind of run."""

    runs: int
    mean_s: float
    p50_s: float
    p99_s: float


class SimResult(msgspec.Struct, frozen=True):
    classes: tuple[ClassResult, ...]
    #: The CPU's busy share (of ``servers`` cores).
    utilization: float
    #: Mean wait of a CPU burst for a free core, and the mean wait for admission.
    burst_wait_s: float
    admit_wait_s: float
    #: Runs in flight (admitted) and model calls in flight: time average and p99.9, p99.
    runs_in_flight_mean: float
    runs_in_flight_p999: int
    model_calls_mean: float
    model_calls_p99: int
    #: Runs per second completed over the measured part (all kinds).
    rate: float
    #: What the random draws came to: arrivals per second and the mean CPU burst. A closed
    #: form evaluated at these (not at the nominal rate) compares like with like.
    arrival_rate: float = 0.0
    mean_burst_s: float = 0.0
    #: Times the loop woke from a sleep with nothing to do, per completed run (with
    #: :class:`LoopWakes`; what a worker's voluntary context switches count).
    wakeups_per_run: float = 0.0


class HostStalls(msgspec.Struct, frozen=True):
    """A shared host taking the loop's core away: off-core episodes of exponential length
    (mean ``mean_s``) covering ``share`` of the time, at random. A burst makes no progress
    during one, and a wait that ends in one is served when it is over: the loop loses
    capacity (``1 - share`` of a core) and every run in flight is held at once, which is
    what moves a p99 on a busy machine."""

    share: float
    mean_s: float

    def __post_init__(self) -> None:
        if not 0 <= self.share < 1 or self.mean_s < 0:
            raise ValueError(f"host stalls need 0 <= share < 1 and mean >= 0, not {self!r}")


class LoopWakes(msgspec.Struct, frozen=True):
    """How an event loop sleeps and wakes. A loop with nothing ready sleeps in its poll;
    the work that wakes it waits for the wake-up first: ``cost_s`` of CPU (the kernel's
    switch, and the caches and branch history the machine's other work took meanwhile,
    refilled by the first bursts). A saturated loop never sleeps and never pays it; a
    loop at 85 % sleeps often, and each wake-up holds every run that is ready.

    ``tick_s``: the loop's clock. Its waits are timers (a simulated model's, a tool's
    sleep), which fire at the first poll after they are due, and the poll's timeout is in
    whole milliseconds (asyncio's and uvloop's alike): a sleeping loop wakes on a tick
    and finds every timer due since. 0: waits end on I/O, which wakes the loop at once."""

    cost_s: float
    tick_s: float = 0.0

    def __post_init__(self) -> None:
        if self.cost_s < 0 or self.tick_s < 0:
            raise ValueError(f"loop wakes need cost >= 0 and tick >= 0, not {self!r}")


class _Host:
    """The schedule of a :class:`HostStalls`, drawn as the clock moves on (its own random
    stream: the runs' draws are the same with or without it)."""

    def __init__(self, stalls: HostStalls, seed: int) -> None:
        self.rng = random.Random(seed * 7919 + 1)
        self.mean_off = stalls.mean_s
        self.mean_on = stalls.mean_s * (1 - stalls.share) / stalls.share
        self.off_start = self.off_end = 0.0
        self._next()

    def _next(self) -> None:
        self.off_start = self.off_end + self.rng.expovariate(1 / self.mean_on)
        self.off_end = self.off_start + self.rng.expovariate(1 / self.mean_off)

    def finish(self, start: float, work: float) -> float:
        """When ``work`` CPU seconds begun at ``start`` end (starts never go back)."""
        t = start
        while True:
            while self.off_end <= t:
                self._next()
            if t < self.off_start:
                room = self.off_start - t
                if work <= room:
                    return t + work
                work -= room
            t = self.off_end


def _host(stalls: HostStalls | None, servers: int, seed: int) -> _Host | None:
    if stalls is None or stalls.share <= 0 or stalls.mean_s <= 0:
        return None
    if servers != 1:
        raise ValueError("host stalls are simulated for one loop (servers=1)")
    return _Host(stalls, seed)


class _Loop:
    """The core a burst runs on: the host's stalls (if any) and the loop's sleeps (a
    :class:`LoopWakes`, if any)."""

    def __init__(self, host: _Host | None, wakes: LoopWakes | None, servers: int) -> None:
        self.host = host
        self.cost, self.tick = (wakes.cost_s, wakes.tick_s) if wakes else (0.0, 0.0)
        if (self.cost or self.tick) and servers != 1:
            raise ValueError("loop wake-ups are simulated for one loop (servers=1)")
        self.wakeups = 0
        self.idle_from = -1.0  # when the loop last ran out of work

    def run(self, now: float, burst: float) -> tuple[float, float]:
        """When a burst begun at ``now`` ends, and the CPU it took: a wake-up's too where
        the loop slept (ran out of work before ``now``)."""
        if self.cost and now > self.idle_from:
            burst += self.cost
            self.wakeups += 1
        return (now + burst if self.host is None else self.host.finish(now, burst)), burst

    def seen(self, t: float, now: float = 0.0) -> float:
        """When the loop sees a wait that ends at ``t``: on its clock's next tick (a
        profile's waits come without the loop's rounding: its lag, taken out of them, timed
        it), never before ``now``."""
        return t if not self.tick else max(now, math.ceil(t / self.tick - 1e-9) * self.tick)


def _kinds(kinds: Sequence[tuple[Workload, float]], runs: int) -> tuple[float, list[float]]:
    """The total rate and the kinds' cumulative shares of it (to draw a kind)."""
    total_rate = sum(rate for _, rate in kinds)
    if total_rate <= 0 or runs < 1:
        raise ValueError("simulate needs a positive rate and at least one run")
    return total_rate, list(itertools.accumulate(rate / total_rate for _, rate in kinds))


# An event is (time, run × 4 + what): a run has at most one event of its own pending (a
# burst or a wait ending) and its arrival comes before either, so the pair is unique and
# ties resolve the same way every time.
_ARRIVE, _WAIT_DONE, _CPU_DONE = 0, 1, 2


class _Occupancy:
    """Time spent at each count (of runs in flight, of model calls): averages and
    percentiles over time, not over events."""

    def __init__(self) -> None:
        self.time_at: list[float] = [0.0]
        self.count = 0
        self.since = 0.0

    def move(self, now: float, delta: int) -> None:
        count = self.count
        self.time_at[count] += now - self.since
        self.since = now
        count += delta
        self.count = count
        if count == len(self.time_at):
            self.time_at.append(0.0)

    def mean(self) -> float:
        total = sum(self.time_at)
        return sum(k * t for k, t in enumerate(self.time_at)) / total if total else 0.0

    def quantile(self, q: float) -> int:
        total = sum(self.time_at)
        acc = 0.0
        for k, t in enumerate(self.time_at):
            acc += t
            if acc >= q * total:
                return k
        return len(self.time_at) - 1


class _Tally:
    """What a simulation counts as it goes: the CPU's busy time, the waits of the bursts
    and of admission, the occupancies, and the latencies of the measured runs (those after
    the warm-up)."""

    def __init__(self, kinds: int, first_counted: int) -> None:
        self.first_counted = first_counted
        self.latencies: list[list[float]] = [[] for _ in range(kinds)]
        self.busy_time = 0.0
        self.all_bursts = 0
        #: Bursts of measured runs, and the time they waited for a core.
        self.bursts = 0
        self.burst_wait = 0.0
        self.admit_wait = 0.0
        self.admitted = 0
        self.in_flight = _Occupancy()
        self.model_calls = _Occupancy()
        self.counted_start = self.counted_end = self.last_arrival = 0.0

    def result(self, *, servers: int, runs: int, total_rate: float, end: float) -> SimResult:
        span = self.counted_end - self.counted_start
        classes = []
        for lat in self.latencies:
            lat.sort()
            classes.append(ClassResult(
                runs=len(lat), mean_s=sum(lat) / len(lat) if lat else 0.0,
                p50_s=percentile(lat, 50), p99_s=percentile(lat, 99)))
        last = self.last_arrival
        return SimResult(
            classes=tuple(classes),
            utilization=self.busy_time / (max(end, 1e-12) * servers),
            burst_wait_s=self.burst_wait / self.bursts if self.bursts else 0.0,
            admit_wait_s=self.admit_wait / self.admitted if self.admitted else 0.0,
            runs_in_flight_mean=self.in_flight.mean(),
            runs_in_flight_p999=self.in_flight.quantile(0.999),
            model_calls_mean=self.model_calls.mean(),
            model_calls_p99=self.model_calls.quantile(0.99),
            rate=(sum(c.runs for c in classes) / span) if span > 0 else total_rate,
            arrival_rate=runs / last if last > 0 else total_rate,
            mean_burst_s=self.busy_time / self.all_bursts if self.all_bursts else 0.0,
        )


def _draw_kind(u: float, cum: list[float]) -> int:
    """The kind whose cumulative share first reaches ``u`` (uniform in [0, 1))."""
    k, last = 0, len(cum) - 1
    while k < last and u > cum[k]:
        k += 1
    return k


def simulate(
    kinds: Sequence[tuple[Workload, float]],
    *,
    servers: int = 1,
    concurrency: int | None = None,
    runs: int = 20_000,
    warmup: float = 0.1,
    seed: int = 1,
    stalls: HostStalls | None = None,
    wakes: LoopWakes | None = None,
) -> SimResult:
    """Simulate ``runs`` arrivals of the ``kinds`` (each a workload and its rate per
    second) on ``servers`` cores sharing one queue, at most ``concurrency`` runs admitted
    at once (None: no limit). The first ``warmup`` share of the runs fill the empty system
    and are left out of the figures. ``stalls``: a shared host's (one core only).
    ``wakes``: the loop's sleeps, what a wake-up costs and its clock's tick (one core
    only; None: a loop that wakes for free, at once). Deterministic for a seed."""
    core = _Loop(_host(stalls, servers, seed), wakes, servers)
    total_rate, cum = _kinds(kinds, runs)
    rng = random.Random(seed)
    limit = concurrency if concurrency is not None else runs + 1
    first_counted = int(runs * warmup)
    tally = _Tally(len(kinds), first_counted)
    in_flight, model_calls = tally.in_flight, tally.model_calls

    heap: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    kind_of, pos = [0] * runs, [0] * runs
    arrived, ready_since = [0.0] * runs, [0.0] * runs
    segs: list[list[float]] = []
    models: list[frozenset[int]] = []
    ready, admit = deque[int](), deque[int]()  # runs waiting for a core, for admission
    busy = all_bursts = bursts = admitted = 0  # cores busy, bursts begun, of them measured
    busy_time = burst_wait = admit_wait = counted_end = 0.0
    latencies = tally.latencies
    draw_gap, draw = rng.expovariate, rng.random
    workloads = [w for w, _ in kinds]

    def start_burst(now: float, run: int) -> None:
        nonlocal busy, busy_time, all_bursts, bursts
        if run >= first_counted:
            bursts += 1
        busy += 1
        all_bursts += 1
        end, burst = core.run(now, segs[run][pos[run]])
        busy_time += burst
        push(heap, (end, run * 4 + _CPU_DONE))

    def want_cpu(now: float, run: int) -> None:
        if busy < servers:
            start_burst(now, run)
        else:
            ready_since[run] = now
            ready.append(run)

    def begin(now: float, run: int) -> None:
        nonlocal admit_wait, admitted
        if run >= first_counted:
            admit_wait += now - arrived[run]
            admitted += 1
        in_flight.move(now, 1)
        want_cpu(now, run)

    def arrive(now: float, run: int) -> None:  # a kind drawn, its run admitted or queued
        if run == first_counted:
            tally.counted_start = now
        kind_of[run] = k = _draw_kind(draw(), cum)
        run_segs, run_models = workloads[k].segments(rng)
        segs.append(run_segs)
        models.append(run_models)
        if run + 1 < runs:  # due then (its latency counts from it); the loop sees it on a tick
            arrived[run + 1] = due = arrived[run] + draw_gap(total_rate)
            push(heap, (core.seen(due), (run + 1) * 4 + _ARRIVE))
        if in_flight.count < limit:
            begin(now, run)
        else:
            admit.append(run)

    arrived[0] = draw_gap(total_rate)
    push(heap, (core.seen(arrived[0]), _ARRIVE))
    now = 0.0  # the clock (the last event's time, once the heap is empty)
    while heap:
        now, code = pop(heap)
        run, event = divmod(code, 4)
        if event == _ARRIVE:
            arrive(now, run)
        elif event == _CPU_DONE:
            busy -= 1
            core.idle_from = now
            if ready:  # the core goes to the next burst in line
                nxt = ready.popleft()
                if nxt >= first_counted:
                    burst_wait += now - ready_since[nxt]
                start_burst(now, nxt)
            run_segs = segs[run]
            i = pos[run] + 1
            if i < len(run_segs):
                pos[run] = i
                if i in models[run]:
                    model_calls.move(now, 1)
                push(heap, (core.seen(now + run_segs[i], now), run * 4 + _WAIT_DONE))
            else:  # the run ends: its slot goes to the next in line
                if run >= first_counted:
                    latencies[kind_of[run]].append(now - arrived[run])
                    counted_end = now
                in_flight.move(now, -1)
                segs[run] = []  # what a finished run held, freed
                if admit:
                    begin(now, admit.popleft())
        else:  # _WAIT_DONE
            i = pos[run]
            if i in models[run]:
                model_calls.move(now, -1)
            pos[run] = i + 1
            want_cpu(now, run)
    tally.busy_time, tally.all_bursts, tally.bursts, tally.burst_wait, tally.admit_wait = \
        busy_time, all_bursts, bursts, burst_wait, admit_wait
    tally.admitted, tally.counted_end, tally.last_arrival = admitted, counted_end, arrived[-1]
    result = tally.result(servers=servers, runs=runs, total_rate=total_rate, end=now)
    return msgspec.structs.replace(result, wakeups_per_run=core.wakeups / runs)
