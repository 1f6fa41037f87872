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
import random
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import msgspec

from podium.engine.profile import percentile

__all__ = ("ClassResult", "SimResult", "Workload", "simulate")


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


_ARRIVE, _WAIT_DONE, _CPU_DONE = 0, 1, 2


class _Occupancy:
    """Time spent at each count (of runs in flight, of model calls): averages and
    percentiles over time, not over events."""

    def __init__(self) -> None:
        self.time_at: dict[int, float] = {}
        self.count = 0
        self.since = 0.0

    def move(self, now: float, delta: int) -> None:
        self.time_at[self.count] = self.time_at.get(self.count, 0.0) + now - self.since
        self.since = now
        self.count += delta

    def mean(self) -> float:
        total = sum(self.time_at.values())
        return sum(k * t for k, t in self.time_at.items()) / total if total else 0.0

    def quantile(self, q: float) -> int:
        total = sum(self.time_at.values())
        acc = 0.0
        for k in sorted(self.time_at):
            acc += self.time_at[k]
            if acc >= q * total:
                return k
        return max(self.time_at, default=0)


def simulate(
    kinds: Sequence[tuple[Workload, float]],
    *,
    servers: int = 1,
    concurrency: int | None = None,
    runs: int = 20_000,
    warmup: float = 0.1,
    seed: int = 1,
) -> SimResult:
    """Simulate ``runs`` arrivals of the ``kinds`` (each a workload and its rate per
    second) on ``servers`` cores sharing one queue, at most ``concurrency`` runs admitted
    at once (None: no limit). The first ``warmup`` share of the runs fill the empty system
    and are left out of the figures. Deterministic for a seed."""
    total_rate = sum(rate for _, rate in kinds)
    if total_rate <= 0 or runs < 1:
        raise ValueError("simulate needs a positive rate and at least one run")
    rng = random.Random(seed)
    cum: list[float] = []
    acc = 0.0
    for _, rate in kinds:
        acc += rate / total_rate
        cum.append(acc)
    limit = concurrency if concurrency is not None else runs + 1
    first_counted = int(runs * warmup)

    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    # Per run: its kind, arrival time, segments and the index of the next one.
    kind_of: list[int] = []
    arrived: list[float] = []
    segs: list[list[float]] = []
    model_idx: list[frozenset[int]] = []
    pos: list[int] = []
    latencies: list[list[float]] = [[] for _ in kinds]
    ready: deque[int] = deque()  # runs whose next burst waits for a core
    ready_since: dict[int, float] = {}
    admit: deque[int] = deque()
    busy = 0
    busy_time = 0.0
    all_bursts = 0
    last_arrival = 0.0
    burst_wait = 0.0
    bursts = 0
    admit_wait = 0.0
    admitted_counted = 0
    in_flight = _Occupancy()
    model_calls = _Occupancy()
    counted_start = counted_end = 0.0

    def push(t: float, kind: int, run: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, run))

    def start_burst(now: float, run: int) -> None:
        nonlocal busy, busy_time, all_bursts
        busy += 1
        all_bursts += 1
        burst = segs[run][pos[run]]
        busy_time += burst
        push(now + burst, _CPU_DONE, run)

    def want_cpu(now: float, run: int) -> None:
        nonlocal bursts, burst_wait
        if busy < servers:
            if run >= first_counted:
                bursts += 1
            start_burst(now, run)
        else:
            ready_since[run] = now
            ready.append(run)

    def begin(now: float, run: int) -> None:
        nonlocal admit_wait, admitted_counted
        if run >= first_counted:
            admit_wait += now - arrived[run]
            admitted_counted += 1
        in_flight.move(now, 1)
        want_cpu(now, run)

    push(rng.expovariate(total_rate), _ARRIVE, 0)
    while heap:
        now, _, event, run = heapq.heappop(heap)
        if event == _ARRIVE:
            if run == first_counted:
                counted_start = now
            last_arrival = now
            u = rng.random()
            k = next(i for i, c in enumerate(cum) if u <= c or i == len(cum) - 1)
            kind_of.append(k)
            arrived.append(now)
            run_segs, run_models = kinds[k][0].segments(rng)
            segs.append(run_segs)
            model_idx.append(run_models)
            pos.append(0)
            if run + 1 < runs:
                push(now + rng.expovariate(total_rate), _ARRIVE, run + 1)
            if in_flight.count < limit:
                begin(now, run)
            else:
                admit.append(run)
        elif event == _CPU_DONE:
            busy -= 1
            if ready:
                nxt = ready.popleft()
                if nxt >= first_counted:
                    bursts += 1
                    burst_wait += now - ready_since.pop(nxt)
                else:
                    del ready_since[nxt]
                start_burst(now, nxt)
            i = pos[run] + 1
            if i < len(segs[run]):
                pos[run] = i
                if i in model_idx[run]:
                    model_calls.move(now, 1)
                push(now + segs[run][i], _WAIT_DONE, run)
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
            if i in model_idx[run]:
                model_calls.move(now, -1)
            pos[run] = i + 1
            want_cpu(now, run)

    span = counted_end - counted_start
    classes = []
    for lat in latencies:
        lat.sort()
        classes.append(ClassResult(
            runs=len(lat), mean_s=sum(lat) / len(lat) if lat else 0.0,
            p50_s=percentile(lat, 50), p99_s=percentile(lat, 99)))
    end = max(now, 1e-12)
    return SimResult(
        classes=tuple(classes),
        utilization=busy_time / (end * servers),
        burst_wait_s=burst_wait / bursts if bursts else 0.0,
        admit_wait_s=admit_wait / admitted_counted if admitted_counted else 0.0,
        runs_in_flight_mean=in_flight.mean(),
        runs_in_flight_p999=in_flight.quantile(0.999),
        model_calls_mean=model_calls.mean(),
        model_calls_p99=model_calls.quantile(0.99),
        rate=(sum(c.runs for c in classes) / span) if span > 0 else total_rate,
        arrival_rate=runs / last_arrival if last_arrival > 0 else total_rate,
        mean_burst_s=busy_time / all_bursts if all_bursts else 0.0,
    )
