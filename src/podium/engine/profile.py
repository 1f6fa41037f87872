"""The workload profile: where each millisecond of each step went, CPU versus waiting.

Every step records wall and CPU nanoseconds for each of its phases. CPU is
the loop thread's CPU time over the synchronous slices of a phase, plus the
CPU a component reports for work off the loop (a thread-pool tool, a
backend client's decoding); the rest of a phase's wall time is waiting.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable

import msgspec

__all__ = (
    "PHASES",
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


class StepProfile(msgspec.Struct, array_like=True, gc=False):
    """Wall and CPU nanoseconds per phase of one step (indexed like :data:`STEP_PHASES`)."""

    step: int
    wall_ns: tuple[int, ...]
    cpu_ns: tuple[int, ...]
    tool_calls: int = 0
    ttft_ns: int = 0

    def __str__(self) -> str:
        """``step 2: model 395.08 ms (CPU 1.21), tools 4.46 ms (CPU 0.80), …``"""
        parts = [
            f"{name} {w / 1e6:.2f} ms (CPU {c / 1e6:.2f})"
            for name, w, c in zip(STEP_PHASES, self.wall_ns, self.cpu_ns, strict=False)
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

    def __str__(self) -> str:
        """A table: per phase, wall, CPU and waiting milliseconds summed over the steps."""

        def row(name: str, wall: int, cpu: int) -> str:
            wait = max(0, wall - cpu)
            return f"{name:<11}{wall / 1e6:>12.2f}{cpu / 1e6:>12.2f}{wait / 1e6:>12.2f}"

        rows = [f"{'phase':<11}{'wall ms':>12}{'CPU ms':>12}{'wait ms':>12}"]
        rows.extend(row(name, wall, cpu) for name, (wall, cpu) in self.phase_totals().items())
        rows.append(row("total", self.wall_ns, self.cpu_ns))
        rows.append(f"({len(self.steps)} step{'s' if len(self.steps) != 1 else ''})")
        return "\n".join(rows)

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
    wall_p50_ms: float
    wall_p95_ms: float
    wall_p99_ms: float
    cpu_ms_total: float
    wait_ms_total: float
    cpu_share: float
    samples: int


class ProfileSummary(msgspec.Struct, frozen=True):
    runs: int
    steps: int
    cpu_us_per_step: float
    phases: dict[str, PhaseSummary]
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None


def percentile(sorted_values: array[int] | list[int] | list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 100])."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * n))
    return float(sorted_values[min(n, rank) - 1])


class ProfileAggregator:
    """Combines many runs' profiles: per-phase wall percentiles and CPU/wait totals.

    Samples are kept in compact ``array('q')`` buffers: no Python objects per
    sample for the garbage collector to scan.
    """

    def __init__(self) -> None:
        # Flat buffers, six values a step (STEP_PHASES order): two C-level extends per step.
        self._step_wall: array[int] = array("q")
        self._step_cpu: array[int] = array("q")
        self._admit: array[int] = array("q")
        self._ttft: array[int] = array("q")
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
        self.steps += 1
        self._step_wall.extend(step.wall_ns)
        self._step_cpu.extend(step.cpu_ns)
        if step.ttft_ns:
            self._ttft.append(step.ttft_ns)

    def extend(self, profiles: Iterable[RunProfile]) -> None:
        for p in profiles:
            self.add_run(p)

    def summary(self) -> ProfileSummary:
        n = len(STEP_PHASES)
        phases: dict[str, PhaseSummary] = {
            "admit": _phase(sorted(self._admit), sum(self._admit), 0)
        }
        step_cpu = 0
        for i, name in enumerate(STEP_PHASES):
            walls = self._step_wall[i::n]
            # CPU can exceed wall by clock granularity on tiny phases; cap it per sample.
            cpu = sum(
                min(c, w) if w else c for c, w in zip(self._step_cpu[i::n], walls, strict=True)
            )
            step_cpu += cpu
            phases[name] = _phase(sorted(walls), sum(walls), cpu)
        ttft = sorted(self._ttft)
        return ProfileSummary(
            runs=self.runs,
            steps=self.steps,
            cpu_us_per_step=(step_cpu / self.steps / 1e3) if self.steps else 0.0,
            phases=phases,
            ttft_p50_ms=percentile(ttft, 50) / 1e6 if ttft else None,
            ttft_p99_ms=percentile(ttft, 99) / 1e6 if ttft else None,
        )


def _phase(samples: list[int], wall_total: int, cpu_total: int) -> PhaseSummary:
    return PhaseSummary(
        wall_p50_ms=percentile(samples, 50) / 1e6,
        wall_p95_ms=percentile(samples, 95) / 1e6,
        wall_p99_ms=percentile(samples, 99) / 1e6,
        cpu_ms_total=cpu_total / 1e6,
        wait_ms_total=max(0, wall_total - cpu_total) / 1e6,
        cpu_share=(cpu_total / wall_total) if wall_total else 0.0,
        samples=len(samples),
    )
