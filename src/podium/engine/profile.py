"""The workload profile: where each millisecond of each step went, CPU versus waiting.

Every step records wall and CPU nanoseconds for each of its phases. CPU is
the loop thread's CPU time over the synchronous slices of a phase, plus the
CPU a component reports for work off the loop (a thread-pool tool, a
backend client's decoding). *Blocked* is time the phase held the loop without
running on the CPU: a coroutine that called ``time.sleep`` or read a file
synchronously (every other session on the loop waited meanwhile). The rest of
a phase's wall time is waiting: for the model, a tool, the store, or the CPU
itself when the OS preempted the thread (a busy host).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable

import msgspec

__all__ = (
    "PHASES",
    "PHASE_COLUMNS",
    "PROFILE_FORMAT",
    "QUANTILE_POINTS",
    "STEP_PHASES",
    "PhaseSummary",
    "ProfileAggregator",
    "ProfileSummary",
    "RunProfile",
    "StepProfile",
    "percentile",
)

#: Phases of a step, in order; ``admit`` (queue wait) is recorded once per run.
STEP_PHASES: tuple[str, ...] = ("assemble", "model", "parse", "tools", "merge", "checkpoint")
PHASES: tuple[str, ...] = ("admit", *STEP_PHASES)
#: The version of the profile's JSON (``podium bench --json``, ``podium runs profile
#: --json``): ``podium plan`` refuses another, whose figures it would misread. Raise it when
#: a field's meaning changes.
PROFILE_FORMAT = 1
#: The percentiles of each phase's wall time that a summary carries (``wall_quantiles_ms``):
#: enough of the distribution's shape, tail included, for ``podium plan`` to simulate with.
QUANTILE_POINTS: tuple[float, ...] = (
    0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97.5, 99, 99.5, 99.9, 100,
)


class StepProfile(msgspec.Struct, array_like=True, gc=False):
    """Wall, CPU and blocked nanoseconds per phase of one step (indexed like
    :data:`STEP_PHASES`); ``blocked_ns`` is empty when the step blocked nothing."""

    step: int
    wall_ns: tuple[int, ...]
    cpu_ns: tuple[int, ...]
    tool_calls: int = 0
    ttft_ns: int = 0
    blocked_ns: tuple[int, ...] = ()

    def __str__(self) -> str:
        """``step 2: model 395.08 ms (CPU 1.21), tools 4.46 ms (CPU 0.80), …``"""
        blocked = self.blocked_ns or (0,) * len(STEP_PHASES)
        parts = [
            f"{name} {w / 1e6:.2f} ms (CPU {c / 1e6:.2f}"
            + (f", {b / 1e6:.2f} blocked)" if b else ")")
            for name, w, c, b in zip(STEP_PHASES, self.wall_ns, self.cpu_ns, blocked,
                                     strict=False)
            if w or c
        ]
        extra = f"; {self.tool_calls} tool call(s)" if self.tool_calls else ""
        ttft = f"; first token {self.ttft_ns / 1e6:.2f} ms" if self.ttft_ns else ""
        return f"step {self.step}: {', '.join(parts) or 'no time recorded'}{extra}{ttft}"


class RunProfile(msgspec.Struct, array_like=True, gc=False):
    """A run's workload profile: its steps and the time it waited for a worker."""

    admit_ns: int = 0
    steps: list[StepProfile] = msgspec.field(default_factory=list)

    @property
    def wall_ns(self) -> int:
        return self.admit_ns + sum(sum(s.wall_ns) for s in self.steps)

    @property
    def cpu_ns(self) -> int:
        return sum(sum(s.cpu_ns) for s in self.steps)

    @property
    def blocked_ns(self) -> int:
        return sum(sum(s.blocked_ns) for s in self.steps)

    def __str__(self) -> str:
        """A table: per phase, wall, CPU, blocked and waiting milliseconds summed over the
        steps."""

        def row(name: str, wall: int, cpu: int, blocked: int) -> str:
            wait = max(0, wall - cpu - blocked)
            return (f"{name:<11}{wall / 1e6:>12.2f}{cpu / 1e6:>12.2f}{blocked / 1e6:>12.2f}"
                    f"{wait / 1e6:>12.2f}")

        rows = [f"{'phase':<11}{'wall ms':>12}{'CPU ms':>12}{'blocked ms':>12}{'wait ms':>12}"]
        blocked = self.phase_blocked()
        rows.extend(row(name, wall, cpu, blocked[name])
                    for name, (wall, cpu) in self.phase_totals().items())
        rows.append(row("total", self.wall_ns, self.cpu_ns, self.blocked_ns))
        rows.append(f"({len(self.steps)} step{'s' if len(self.steps) != 1 else ''})")
        return "\n".join(rows)

    def phase_blocked(self) -> dict[str, int]:
        """``{phase: blocked_ns}`` summed over the run (see :class:`StepProfile`)."""
        totals = dict.fromkeys(PHASES, 0)
        for s in self.steps:
            for name, b in zip(STEP_PHASES, s.blocked_ns, strict=False):
                totals[name] += b
        return totals

    def phase_totals(self) -> dict[str, tuple[int, int]]:
        """``{phase: (wall_ns, cpu_ns)}`` summed over the run."""
        totals = {"admit": (self.admit_ns, 0)}
        for i, name in enumerate(STEP_PHASES):
            totals[name] = (
                sum(s.wall_ns[i] for s in self.steps),
                sum(s.cpu_ns[i] for s in self.steps),
            )
        return totals


class PhaseSummary(msgspec.Struct, frozen=True):
    """One phase over many steps: wall-time percentiles, CPU and waiting totals.

    A phase that did not happen in a step is no sample of it: ``tools`` and ``merge``
    count only the steps that called a tool. With no sample (no step had the phase, no
    run matched) the percentiles are None, and ``cpu_share`` is None with no wall time.
    CPU is the loop thread's plus what work off the loop reported (thread- and
    process-pool tools): with tools running in parallel it can exceed the phase's wall
    time, and ``cpu_share`` is then above 1, truly. ``wait_ms_total`` sums each step's
    wall time less its CPU, never below 0.
    """

    wall_p50_ms: float | None
    wall_p95_ms: float | None
    wall_p99_ms: float | None
    cpu_ms_total: float
    wait_ms_total: float
    cpu_share: float | None
    samples: int
    #: Wall ms at each of :data:`QUANTILE_POINTS` (None: no sample).
    wall_quantiles_ms: tuple[float, ...] | None = None
    blocked_ms_total: float = 0.0

    def cells(self) -> tuple[str, str, str, str, str, str, str]:
        """The :data:`PHASE_COLUMNS` as a table shows them ("-": none)."""
        p50, p95, p99 = (_or_dash(v, "{:.3f}") for v in
                         (self.wall_p50_ms, self.wall_p95_ms, self.wall_p99_ms))
        return (p50, p95, p99, f"{self.cpu_ms_total:.1f}", f"{self.blocked_ms_total:.1f}",
                f"{self.wait_ms_total:.1f}", _or_dash(self.cpu_share, "{:.0%}"))


#: The columns of a phase table (:meth:`PhaseSummary.cells`).
PHASE_COLUMNS = ("p50 ms", "p95 ms", "p99 ms", "CPU ms", "blocked ms", "wait ms", "CPU share")


def _or_dash(value: float | None, spec: str) -> str:
    return "-" if value is None else spec.format(value)


class ProfileSummary(msgspec.Struct, frozen=True):
    runs: int
    steps: int
    cpu_us_per_step: float
    phases: dict[str, PhaseSummary]
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    profile_format: int = PROFILE_FORMAT


def percentile(sorted_values: array[int] | list[int] | list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 100]); 0.0 for an
    empty one, so a caller that must tell "no sample" from zero checks for it first (as
    :class:`PhaseSummary` does)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * n))
    return float(sorted_values[min(n, rank) - 1])


#: CPU above a phase's wall time by at most this much is the clocks' granularity (a tiny
#: phase read by two clocks) and is cut to the wall time; more is real CPU done in
#: parallel off the loop (two process-pool tools at once) and is kept.
_CPU_GRAIN_NS = 1_000_000
#: Phases that happen only in a step that calls tools: the other steps are no samples.
_TOOL_PHASES = frozenset({STEP_PHASES.index("tools"), STEP_PHASES.index("merge")})


class ProfileAggregator:
    """Combines many runs' profiles: per-phase wall percentiles and CPU/wait totals
    (see :class:`PhaseSummary`).

    Samples are kept in compact ``array('q')`` buffers: no Python objects per
    sample for the garbage collector to scan.
    """

    def __init__(self) -> None:
        # Flat buffers, six values a step (STEP_PHASES order): two C-level extends per step.
        self._step_wall: array[int] = array("q")
        self._step_cpu: array[int] = array("q")
        self._admit: array[int] = array("q")
        self._ttft: array[int] = array("q")
        #: The indexes of the steps that called tools: the tools and merge phases' samples.
        self._tool_steps: array[int] = array("q")
        #: Blocked nanoseconds per phase, summed (few steps block: no buffer per step).
        self._blocked = [0] * len(STEP_PHASES)
        self.runs = 0
        self.steps = 0

    def finish_run(self, admit_ns: int) -> None:
        """Count a run whose steps were added one by one with :meth:`add_step`."""
        self.runs += 1
        self._admit.append(admit_ns)

    def add_run(self, profile: RunProfile) -> None:
        """Add a finished run's whole profile."""
        self.finish_run(profile.admit_ns)
        for step in profile.steps:
            self.add_step(step)

    def add_step(self, step: StepProfile) -> None:
        if step.tool_calls:
            self._tool_steps.append(self.steps)
        self.steps += 1
        self._step_wall.extend(step.wall_ns)
        self._step_cpu.extend(step.cpu_ns)
        if step.ttft_ns:
            self._ttft.append(step.ttft_ns)
        if step.blocked_ns:
            self._blocked = [a + b for a, b in zip(self._blocked, step.blocked_ns, strict=False)]

    def extend(self, profiles: Iterable[RunProfile]) -> None:
        for p in profiles:
            self.add_run(p)

    def summary(self) -> ProfileSummary:
        n = len(STEP_PHASES)
        admit = sum(self._admit)
        phases: dict[str, PhaseSummary] = {"admit": _phase(sorted(self._admit), admit, 0, admit)}
        step_cpu = 0
        for i, name in enumerate(STEP_PHASES):
            walls = self._step_wall[i::n]
            cpu, wait = _cpu_and_wait(self._step_cpu[i::n], walls)
            step_cpu += cpu
            # Totals over every step (a step without the phase adds zeros), percentiles over
            # the steps that had it.
            samples = [walls[j] for j in self._tool_steps] if i in _TOOL_PHASES else walls
            blocked = self._blocked[i]
            phases[name] = _phase(sorted(samples), sum(walls), cpu, max(0, wait - blocked),
                                  blocked)
        ttft = sorted(self._ttft)
        return ProfileSummary(
            runs=self.runs,
            steps=self.steps,
            cpu_us_per_step=(step_cpu / self.steps / 1e3) if self.steps else 0.0,
            phases=phases,
            ttft_p50_ms=percentile(ttft, 50) / 1e6 if ttft else None,
            ttft_p99_ms=percentile(ttft, 99) / 1e6 if ttft else None,
        )


def _cpu_and_wait(cpus: array[int], walls: array[int]) -> tuple[int, int]:
    """A phase's CPU and waiting over its steps. A step's CPU above its wall time by clock
    granularity only is cut to it (a phase with no wall time recorded keeps its CPU); more
    is parallel work off the loop, kept. Waiting is each step's wall time less its CPU, at
    least 0: one step's parallel CPU does not hide another step's wait."""
    cpu = wait = 0
    for c, w in zip(cpus, walls, strict=True):
        if w and 0 < c - w <= _CPU_GRAIN_NS:
            c = w
        cpu += c
        if w > c:
            wait += w - c
    return cpu, wait


def _phase(
    samples: list[int], wall_total: int, cpu_total: int, wait_total: int, blocked_total: int = 0
) -> PhaseSummary:
    def ms(q: float) -> float | None:
        return percentile(samples, q) / 1e6 if samples else None

    return PhaseSummary(
        wall_p50_ms=ms(50),
        wall_p95_ms=ms(95),
        wall_p99_ms=ms(99),
        cpu_ms_total=cpu_total / 1e6,
        wait_ms_total=wait_total / 1e6,
        cpu_share=(cpu_total / wall_total) if wall_total else None,
        samples=len(samples),
        wall_quantiles_ms=tuple(percentile(samples, q) / 1e6 for q in QUANTILE_POINTS)
        if samples else None,
        blocked_ms_total=blocked_total / 1e6,
    )
