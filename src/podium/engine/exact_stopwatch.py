"""The exact stopwatch (``clock="thread"``): per-phase wall and CPU clocks for the steps of
one run, the CPU clock read around every synchronous slice.

Wall time is read at every phase boundary (a cheap monotonic clock, ~50 ns).
The thread's CPU clock is a system call (0.6–3 µs on a virtual machine, more
under load), so it is read only where the run's synchronous slices begin and
end: where the run starts, where it suspends on real waiting, where it resumes,
and before its final record is written — never at a step or phase boundary.
A slice's CPU is split among the phases that ran in it in proportion to their
running (not waiting) wall time; inside one slice nothing else runs on the loop
thread, so that split is exact up to OS preemption, and other runs' CPU never
lands in this run's phases.

A step that ends while its slice is still open (an instant model and tool, an
in-memory store) gets provisional CPU figures — the running wall time, what
the CPU clock says unless the OS preempted the thread — which are made exact
in place when the slice closes. The aggregator (``sink``) is given each step
once its figures are exact; metrics hooks see them as of the step's end. The
profile journaled with a step is the provisional one.

Also the layout of the figures list every stopwatch keeps (``t``), shared with
:mod:`podium.engine.sampled_stopwatch`. Import from :mod:`podium.engine.stopwatch`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import msgspec

from podium.engine.profile import StepProfile
from podium.observe.threadclock import LONG_NS, blocked_of, thread_clock

__all__ = ("ENDS", "MODEL_NS", "Stopwatch")

_perf = time.perf_counter_ns
_PHASES = range(6)
_CHECKPOINT = 5
_MARK, _SLICE_CPU, _SPLIT, _HELD_RAN, _SPAN, _HELD_TO = 18, 19, 20, 21, 22, 23
#: ``t[24:29]``: where the step loop stamps the end of each of the first five phases
#: (``t[ENDS + phase] = sw.stamp()``). A stamp counts while it is later than the last
#: boundary booked (``t[18]``): older ones are a past step's, never cleared (see
#: :meth:`Stopwatch.fold`).
ENDS = 24
#: ``t[29]``: the model's wall time in the steps closed so far (the run's attained service).
MODEL_NS = 29
#: ``t[30:36]``: per phase of the current step, the time it held the loop without running
#: (blocked). The sampled stopwatch's span of running time being watched starts at perf time
#: ``t[22]``; ``t[37:43]`` are the phases' wall times then (all 0 at a step's start).
#: ``t[36]``: where the held steps start in ``steps`` (the exact stopwatch's).
#: A step on the fast lane reads and writes ``t[18:30]`` only: at thousands of sessions each
#: step finds its run's figures out of the cache, so what it touches is kept in few lines.
_BLOCKED, _HELD_FROM, _BASES = 30, 36, 37
_FIGURES = 43
_ZERO5 = (0,) * 5
_ZERO6 = (0,) * 6
_ZEROS = (0,) * 18


def _split(spans: list[int], spent: int, blocked: int) -> tuple[list[int], list[int]]:
    """A span of running time used ``spent`` CPU and blocked ``blocked`` of its time:
    each phase's share, given each phase's running time in it (``spans``). The phases that
    ran a short while are taken to have run on the CPU (the blocking call is in a long
    one: a 200 ms sleep is the tool's, not the parse's before it); the long ones share
    the rest by their running time."""
    long = [r if r >= _SHORT_NS else 0 for r in spans]
    long_total = sum(long)
    short = sum(spans) - long_total
    if long_total <= 0 or short > spent:  # no phase stands out: all share alike
        long, long_total, short = spans, sum(spans), 0
    cpu = [r if r < _SHORT_NS and short else 0 for r in spans]
    rest = spent - short
    for p, r in enumerate(long):
        if r:
            cpu[p] = rest * r // long_total
    return cpu, [blocked * r // long_total for r in long]


#: A phase's running time within a long span below which it is taken to have run on the CPU.
_SHORT_NS = LONG_NS // 4


def _blocked(t: list[int]) -> tuple[int, ...]:
    """The current step's blocked figures: none (one shared empty tuple) if it blocked
    nothing, the usual case."""
    if t[30] or t[31] or t[32] or t[33] or t[34] or t[35]:
        return tuple(t[30:36])
    return ()


# At a wait (suspend), the phase ends stamped so far are booked (folded): they are set to 0
# then, "not stamped" (older than any boundary), so that a waiting run holds no int object
# for them (five of 32 bytes each, at thousands of waiting runs). A step that does not wait
# leaves them: its next stamps replace them, and a write is all a stamp may cost.


def _figures() -> list[int]:
    return [0] * _FIGURES


# A gc=False struct: a run's stopwatch adds one object the collector scans, its list. The
# figures that change at every lap live in that list, not in fields: a msgspec struct's
# attribute writes take Python's generic (slow) path, a list's item writes the fast one.
# The steps whose figures are still provisional are a range of the run's own profile list
# (``steps``), not a list of their own: one tracked object less per run.
class Stopwatch(msgspec.Struct, gc=False):
    """Times the six phases of each step of one run.

    Call :meth:`lap` at each phase end, :meth:`suspend`/:meth:`resume` around
    real waits, :meth:`snapshot` for the profile to journal, :meth:`close_step`
    after the checkpoint and :meth:`settle` before the run's final record is
    written (:meth:`close_new`, :meth:`close_final`: a step whose entry the store
    keeps as given, profiled in one call after it was journaled).

    The step loop's fast lane does not call :meth:`lap`: it stamps each phase's end
    in the figures list, ``t[ENDS + phase] = sw.stamp()`` (one clock read, no call
    into Python: five a step), phases in their order; the next call that needs the
    walls (:meth:`snapshot`, :meth:`suspend`, :meth:`lap`…) books them (:meth:`fold`).
    """

    #: The clock the step loop stamps phase ends with (NoStopwatch's reads none: 0).
    stamp: ClassVar[Callable[[], int]] = staticmethod(time.perf_counter_ns)

    clock: Any  # Callable[[], int]; typed loosely so msgspec accepts a builtin
    #: Called with each step's profile once its CPU figures are exact (the aggregator).
    sink: Any = None
    #: Per phase of the current step: ``[0:6]`` wall time; ``[6:12]`` CPU of its closed
    #: slices (and CPU booked from off the loop); ``[12:18]`` wall time that is not
    #: running time of the open slice (time waited, and running time of closed slices).
    #: Then ``[18]`` the perf time of the last boundary, ``[19]`` the CPU clock at the
    #: start of the open slice, ``[20]`` 1 if this step has waited (or had CPU booked
    #: from off the loop), ``[21]`` the wall time of the held steps, ``[36]`` and ``[23]``
    #: the range of ``steps`` that is held: one-slice steps closed inside the open slice,
    #: whose CPU is their wall time until the slice closes (the rest: see ``ENDS`` above).
    t: list[int] = msgspec.field(default_factory=_figures)
    #: The run's step profiles (its ``RunProfile.steps``): :meth:`close_step` files each
    #: step's profile here.
    steps: list[StepProfile] = msgspec.field(default_factory=list)
    #: How far (a share) a slice's CPU may be from its running time for the held steps'
    #: provisional figures (their running time) to stand as they are.
    tolerance: float = 0.0

    @classmethod
    def start(
        cls,
        clock: Callable[[], int],
        sink: Callable[[StepProfile], None] | None = None,
        steps: list[StepProfile] | None = None,
    ) -> Stopwatch:
        """Start timing; ``steps`` is the run's profile list (earlier steps replayed)."""
        sw = cls(clock, sink, steps=[] if steps is None else steps)
        t = sw.t
        t[_MARK] = _perf()
        t[_HELD_FROM] = t[_HELD_TO] = len(sw.steps)
        if sw.steps:  # a run driven again: the model time its earlier steps had counts
            t[MODEL_NS] = sum([p.wall_ns[1] for p in sw.steps if len(p.wall_ns) > 1])
        sw._open_slice()
        return sw

    @property
    def wall(self) -> list[int]:
        """Wall nanoseconds per phase of the current step (a copy)."""
        self.fold()
        return self.t[0:6]

    @property
    def model_ns(self) -> int:
        """The model's wall time in the steps closed so far."""
        return self.t[MODEL_NS]

    def fold(self) -> None:
        """Book the phase ends the step loop stamped since the last boundary, in phase
        order, as :meth:`lap` would have at each (the last becomes the boundary)."""
        t = self.t
        mark = t[_MARK]
        if max(t[24:29]) <= mark:  # nothing stamped since
            return
        # Spelled out: a loop is slower on 3.11. A stamp equal to the boundary would add 0.
        if (end := t[24]) > mark:
            t[0] += end - mark
            mark = end
        if (end := t[25]) > mark:
            t[1] += end - mark
            mark = end
        if (end := t[26]) > mark:
            t[2] += end - mark
            mark = end
        if (end := t[27]) > mark:
            t[3] += end - mark
            mark = end
        if (end := t[28]) > mark:
            t[4] += end - mark
            mark = end
        t[_MARK] = mark

    def lap(self, phase: int) -> None:
        """End ``phase`` now; the next phase starts now."""
        self.fold()
        t = self.t
        now = _perf()
        t[phase] += now - t[18]
        t[18] = now

    def suspend(self, phase: int) -> None:
        """``phase`` is about to wait: close the current slice."""
        self.fold()
        t = self.t
        t[24:29] = _ZERO5  # booked: a waiting run holds no int for them (see _figures)
        now = _perf()
        t[phase] += now - t[_MARK]
        t[_MARK] = now
        self._close_slice(reopen=False)  # resume() opens the next one

    def resume(self, phase: int) -> None:
        """Back from waiting in ``phase``: the time since :meth:`suspend` was waiting."""
        t = self.t
        now = _perf()
        waited = now - t[_MARK]
        t[phase] += waited
        t[12 + phase] += waited
        t[_MARK] = now
        t[_SPLIT] = 1  # the step waited: its wall time is not all CPU
        self._open_slice()

    def add_cpu(self, phase: int, ns: int) -> None:
        """Book CPU a component did off the loop thread (thread pool, backend client)."""
        if ns:
            t = self.t
            t[6 + phase] += ns
            t[_SPLIT] = 1

    def add_blocked(self, phase: int, ns: int) -> None:
        """Book time ``phase`` held the loop while the stopwatch was suspended (an async
        tool's later slice that slept): it was timed as waiting, it is blocked."""
        if ns:
            t = self.t
            t[_BLOCKED + phase] += ns
            t[_SPLIT] = 1

    def carry(self, profile: StepProfile) -> None:
        """Add to this step what it did before it stopped (a park on a human, a worker's
        death): ``profile``'s wall and CPU figures, as time outside the open slice."""
        t = self.t
        for p, (wall, cpu) in enumerate(zip(profile.wall_ns, profile.cpu_ns, strict=False)):
            t[p] += wall
            t[12 + p] += wall  # not running time of the slice open now
            t[_BASES + p] += wall  # nor of the span being watched (it would count twice)
            t[6 + p] += cpu
        for p, blocked in enumerate(profile.blocked_ns):
            t[_BLOCKED + p] += blocked
        t[_SPLIT] = 1

    def snapshot(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        """The step's profile so far, the open slice's CPU taken as its running wall time."""
        self.fold()
        t = self.t
        wall = tuple(t[0:6])
        if not t[_SPLIT]:  # one slice so far: its running time is all of the wall time
            return StepProfile(step, wall, wall, tool_calls, ttft_ns)
        cpu = tuple([t[6 + p] + t[p] - t[12 + p] for p in _PHASES])
        return StepProfile(step, wall, cpu, tool_calls, ttft_ns, _blocked(t))

    def close_new(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        """End the checkpoint phase and make the step's profile, filed in ``steps``: for a
        step journaled without one, whose entry the store keeps (it is given this one)."""
        profile = self.snapshot(step, tool_calls, ttft_ns)
        self.close_step(profile)
        return profile

    def close_final(self, step: int, ttft_ns: int) -> StepProfile | None:
        """:meth:`settle`, :meth:`snapshot` and :meth:`close_step` in one call: the final
        step's profile, for a run whose store keeps its entries as given (its record and
        journal show the profile filed after the write, figures exact)."""
        self.settle()
        profile = self.snapshot(step, 0, ttft_ns)
        self.close_step(profile)
        return profile

    def close_step(self, profile: StepProfile | None) -> None:
        """End the checkpoint phase, give ``profile`` the step's figures and file it in
        ``steps`` (unless it is there already: a final step's is filed before the run's
        record is written); the next step starts.

        A step that waited reads the CPU clock here; one that ran in one slice does
        not: its CPU figures are its wall time until that slice closes (below).
        """
        self.fold()
        t = self.t
        now = _perf()
        t[_CHECKPOINT] += now - t[_MARK]
        t[_MARK] = now
        t[MODEL_NS] += t[1]
        steps = self.steps
        if t[_SPLIT]:
            self._close_slice()
            wall, cpu, blocked = tuple(t[0:6]), tuple(t[6:12]), _blocked(t)
            t[0:18] = _ZEROS
            t[30:36] = _ZERO6
            t[_SPLIT] = 0
            if profile is not None:
                profile.wall_ns = wall
                profile.cpu_ns = cpu
                profile.blocked_ns = blocked
                if not steps or steps[-1] is not profile:
                    steps.append(profile)
                t[_HELD_FROM] = t[_HELD_TO] = len(steps)
                if self.sink is not None:
                    self.sink(profile)
            return
        wall = tuple(t[0:6])
        t[0:6] = _ZERO6
        if profile is not None:
            profile.wall_ns = profile.cpu_ns = wall
            if not steps or steps[-1] is not profile:
                steps.append(profile)
            t[_HELD_TO] = len(steps)
            t[_HELD_RAN] += sum(wall)

    def settle(self) -> None:
        """Make every figure so far exact (one clock read): before the run's record is
        written."""
        self.fold()
        t = self.t
        now = _perf()
        t[_CHECKPOINT] += now - t[_MARK]
        t[_MARK] = now
        self._close_slice()

    def finish(self) -> None:
        """The drive stops: make the held steps' figures exact (one clock read, if any)."""
        self.fold()
        t = self.t
        if t[_HELD_TO] > t[_HELD_FROM]:
            self._close_slice(reopen=False)

    def _open_slice(self) -> None:
        """A synchronous slice starts now."""
        self.t[_SLICE_CPU] = self.clock()

    def _slice_cpu(self, running: int, reopen: bool) -> int:
        """The CPU the closing slice used (``running``: its running wall time); with
        ``reopen`` the next slice starts now."""
        t = self.t
        c: int = self.clock()
        spent = c - t[_SLICE_CPU]
        t[_SLICE_CPU] = c
        return spent

    def _close_slice(self, reopen: bool = True) -> None:
        t = self.t
        # Spelled out, not comprehensions: this runs at every real wait (3+ a step with a
        # remote model and tool), and a comprehension is a function call on 3.11.
        ran = [t[0] - t[12], t[1] - t[13], t[2] - t[14], t[3] - t[15], t[4] - t[16], t[5] - t[17]]
        total = ran[0] + ran[1] + ran[2] + ran[3] + ran[4] + ran[5] + t[_HELD_RAN]
        spent = self._slice_cpu(total, reopen)
        if total <= 0:
            return
        first, end = t[_HELD_FROM], t[_HELD_TO]
        if end > first:  # the steps that ran in this slice get their share
            t[_HELD_FROM] = end
            t[_HELD_RAN] = 0
            sink = self.sink
            # Provisional figures within the tolerance of the slice's CPU stay as they are.
            rescale = abs(spent - total) > self.tolerance * total
            if rescale or sink is not None:  # else there is nothing to do for them
                for profile in self.steps[first:end]:
                    if rescale:
                        a, b, c, d, e, f = profile.cpu_ns
                        profile.cpu_ns = (
                            spent * a // total,
                            spent * b // total,
                            spent * c // total,
                            spent * d // total,
                            spent * e // total,
                            spent * f // total,
                        )
                        if spent < total:
                            off = blocked_of(spent, total - spent, thread_clock.bound)
                            if off:
                                profile.blocked_ns = (
                                    off * a // total, off * b // total, off * c // total,
                                    off * d // total, off * e // total, off * f // total,
                                )
                    if sink is not None:
                        sink(profile)
        # What the slice ran less than its running time: blocked, less the preemption a
        # thread given its measured share of its runnable time suffers.
        off = total - spent
        blocked = blocked_of(spent, off, thread_clock.bound) if off > self.tolerance * total else 0
        if blocked and total == sum(ran):  # (held steps' running time: shared alike)
            cpus, blocks = _split(ran, spent, blocked)
            for p in _PHASES:
                t[6 + p] += cpus[p]
                t[12 + p] += ran[p]
                t[_BLOCKED + p] += blocks[p]
        else:
            for p in _PHASES:
                r = ran[p]
                if r:
                    t[6 + p] += spent * r // total
                    t[12 + p] += r
                    if blocked:
                        t[_BLOCKED + p] += blocked * r // total
        t[_SPLIT] = 1
