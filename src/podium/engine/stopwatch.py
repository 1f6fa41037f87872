"""Per-phase wall and CPU clocks for the steps of one run, with as few clock reads as possible.

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

The engine's default is :class:`SampledStopwatch`, which splits no slice: it
estimates each phase's CPU as its running time times the thread's CPU/running
ratio, measured with the CPU clock around one slice in :data:`SAMPLE_EVERY`;
:class:`Stopwatch` (``clock="thread"``) reads it around every slice, for the exact
split above. ``Engine(profile=False)`` uses :class:`NoStopwatch`: no clock is
read at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal, get_args

import msgspec

from podium.engine.profile import StepProfile
from podium.errors import ConfigError
from podium.observe.threadclock import ANCHOR_NS, LONG_NS, blocked_of, thread_clock

__all__ = ("SAMPLE_EVERY", "CpuClock", "NoStopwatch", "SampledStopwatch", "Stopwatch", "cpu_clock")

CpuClock = Literal["sampled", "thread", "wall"]

_perf = time.perf_counter_ns
_PHASES = range(6)
_CHECKPOINT = 5
_MARK, _SLICE_CPU, _SPLIT, _HELD_RAN, _HELD_FROM, _HELD_TO = 18, 19, 20, 21, 22, 23
#: ``t[24:29]``: where the step loop stamps the end of each of the first five phases
#: (``t[ENDS + phase] = sw.stamp()``). A stamp counts while it is later than the last
#: boundary booked (``t[18]``): older ones are a past step's, never cleared (see
#: :meth:`Stopwatch.fold`).
ENDS = 24
#: ``t[29]``: the model's wall time in the steps closed so far (the run's attained service).
MODEL_NS = 29
#: ``t[30:36]``: per phase of the current step, the time it held the loop without running
#: (blocked). The sampled stopwatch's span of running time being watched starts at perf time
#: ``t[36]``; ``t[37:43]`` are the phases' wall times then (all 0 at a step's start).
_BLOCKED, _SPAN, _BASES = 30, 36, 37
_FIGURES = 43
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


def cpu_clock(kind: CpuClock) -> Callable[[], int]:
    """``thread`` and ``sampled``: the loop thread's CPU time. ``wall``: the monotonic
    clock, equal to CPU time for synchronous slices unless the OS preempts the thread."""
    if kind not in get_args(CpuClock):  # a typo would silently pick the exact, costly clock
        raise ConfigError(f"clock={kind!r}: choose one of {', '.join(get_args(CpuClock))}")
    return time.perf_counter_ns if kind == "wall" else time.thread_time_ns


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
    written.

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
    #: from off the loop), ``[21]`` the wall time of the held steps, ``[22:24]`` the
    #: range of ``steps`` that is held: one-slice steps closed inside the open slice,
    #: whose CPU is their wall time until the slice closes.
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


#: ``clock="sampled"`` reads the CPU clock around one synchronous slice in this many (each
#: read is a system call; the ratio is the thread's and moves with the machine's load, so
#: at thousands of slices a second one in 32 still measures it many times a second).
SAMPLE_EVERY = 32
#: How far below 1.0 the sampled CPU/running ratio may be and still be taken as 1.0.
SAMPLED_TOLERANCE = 0.02


class _Calibration:
    """The loop thread's CPU per running nanosecond (shared by every run of the process:
    preemption is the thread's, not a run's): the ratio measured on the sampled slices,
    but never above the bound the thread's CPU clock sets on all the running time booked
    (:meth:`~podium.observe.threadclock.ThreadClock.anchor`), so the phases' CPU never adds
    up to more than the thread's, whether or not the runs' steps wait (a step that never
    waits is never a sampled slice)."""

    __slots__ = ("bound", "ratio", "sampled", "scale", "scaled", "slices")

    def __init__(self) -> None:
        self.ratio = 1.0
        #: The ratio the sampled slices measured, and the thread's CPU over the running time
        #: booked (its moving averages); ``ratio`` is the lesser.
        self.sampled = 1.0
        self.bound = 1.0
        #: ``ratio`` in fixed point (times 2**16): CPU figures are scaled in integers.
        self.scale = 1 << 16
        #: Whether CPU figures are scaled: the ratio is below 1 by more than the tolerance
        #: (kept here, not worked out at every step).
        self.scaled = False
        self.slices = 0

    def set(self, ratio: float, tolerance: float) -> None:
        """Take ``ratio`` as the thread's (a measured slice's average, or a test's)."""
        self.sampled = ratio
        self._apply(min(ratio, self.bound), tolerance)

    def bound_by(self, bound: float, tolerance: float) -> None:
        """The thread's CPU clock allows no more than ``bound``."""
        self.bound = bound
        self._apply(min(self.sampled, bound), tolerance)

    def _apply(self, ratio: float, tolerance: float) -> None:
        self.ratio = ratio
        self.scale = int(ratio * 65536)
        self.scaled = ratio < 1.0 - tolerance


_calibration = _Calibration()


# ``SampledStopwatch.t[21]``: the perf time the measured slice began (``t[19]`` holds the
# CPU clock then, -1 while no slice is measured).
_SLICE_START = 21


class SampledStopwatch(Stopwatch, gc=False):
    """The default (``clock="sampled"``): each phase's CPU is its running time (its wall
    time less its waits) times the loop thread's CPU/running ratio, plus the CPU booked
    from off the loop. The ratio is measured with the CPU clock around one synchronous
    slice in :data:`SAMPLE_EVERY` (a moving average shared by every run of the process:
    preemption is the thread's, not a run's); it is 1.0 unless the OS preempts the thread.

    So no slice is accounted for phase by phase: a wait costs two wall-clock reads, and
    a step's figures are final when it closes (the aggregator hears of it then). Within
    ``tolerance`` of 1.0 the ratio is taken as 1.0, and a step that never waited shares
    one tuple for its wall and CPU figures. On a virtual machine a CPU-clock read costs
    0.5–3 µs (more under load), and a step that waits for its model and a tool has at
    least three slices; ``clock="thread"`` reads it around every slice, for exact figures
    per step at that price.
    """

    tolerance: float = SAMPLED_TOLERANCE  # an estimate already: 2 % is within its error

    def suspend(self, phase: int) -> None:
        self.fold()
        t = self.t
        now = _perf()
        t[phase] += now - t[_MARK]
        t[_MARK] = now
        if now - t[_SPAN] >= LONG_NS:
            self._check(now, t)  # (a long slice is no sample of the ratio: it is measured)
        elif t[_SLICE_CPU] >= 0:
            self._calibrate(now)

    def resume(self, phase: int) -> None:
        # Stopwatch.resume with the slice's opening inlined: at every real wait.
        t = self.t
        now = _perf()
        waited = now - t[_MARK]
        t[phase] += waited
        t[12 + phase] += waited
        t[_MARK] = now
        t[_SPLIT] = 1
        t[_SPAN] = now  # a span of running time starts: the phases' walls are its bases
        t[37:43] = t[0:6]
        if now - thread_clock.at > ANCHOR_NS:
            thread_clock.anchor(now, self.clock, _calibration, self.tolerance)
        cal = _calibration
        cal.slices += 1
        if cal.slices % SAMPLE_EVERY == 0:
            t[_SLICE_START] = now
            t[_SLICE_CPU] = self.clock()
        else:
            t[_SLICE_CPU] = -1

    def snapshot(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        t = self.t
        mark, a, e = t[_MARK], t[24], t[28]
        if mark < a < e and e - mark < LONG_NS and not t[_SPLIT]:
            # The fast lane's step, stamped from its start to its merge in one slice: its
            # walls so far are the stamps' differences (t[0:6] is still all 0: a lap or a
            # wait would have folded its first stamp, a carried profile split the step).
            # (A long one is checked against the CPU clock, below.)
            b, c, d = t[25], t[26], t[27]
            wall: tuple[int, ...] = (a - mark, b - a, c - b, d - c, e - d, 0)
            t[_MARK] = e
            if not _calibration.scaled:
                return StepProfile(step, wall, wall, tool_calls, ttft_ns)
        else:
            self.fold()
            if t[_MARK] - t[_SPAN] >= LONG_NS:
                self._check(t[_MARK], t)
            wall = tuple(t[0:6])
            if t[_SPLIT]:
                return StepProfile(step, wall, self._cpu(wall), tool_calls, ttft_ns, _blocked(t))
            if not _calibration.scaled:
                return StepProfile(step, wall, wall, tool_calls, ttft_ns)
        # One slice, nothing waited or booked from off the loop: each phase's CPU is its
        # wall time scaled (the usual case on a busy machine, whose ratio is below 1).
        q = _calibration.scale
        cpu = (wall[0] * q >> 16, wall[1] * q >> 16, wall[2] * q >> 16, wall[3] * q >> 16,
               wall[4] * q >> 16, wall[5] * q >> 16)
        return StepProfile(step, wall, cpu, tool_calls, ttft_ns)

    def close_new(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        t = self.t
        mark, a, e = t[_MARK], t[24], t[28]
        now = _perf()
        if mark < a < e and now - mark < LONG_NS and not t[_SPLIT]:
            # The fast lane's step in one slice (see snapshot), its checkpoint included:
            # final at once, and nothing of the step left in t[0:6] to reset. (A long one
            # is checked against the CPU clock: the general path.)
            b, c, d = t[25], t[26], t[27]
            wall = (a - mark, b - a, c - b, d - c, e - d, now - e)
            t[_MARK] = t[_SPAN] = now
            clock = thread_clock
            clock.booked += now - mark
            if now - clock.at > ANCHOR_NS:
                clock.anchor(now, self.clock, _calibration, self.tolerance)
            t[MODEL_NS] += wall[1]
            cpu = wall
            if _calibration.scaled:
                q = _calibration.scale
                cpu = (wall[0] * q >> 16, wall[1] * q >> 16, wall[2] * q >> 16,
                       wall[3] * q >> 16, wall[4] * q >> 16, wall[5] * q >> 16)
            profile = StepProfile(step, wall, cpu, tool_calls, ttft_ns)
            self.steps.append(profile)
            if self.sink is not None:
                self.sink(profile)
            return profile
        return super().close_new(step, tool_calls, ttft_ns)

    def close_step(self, profile: StepProfile | None) -> None:
        """As :meth:`Stopwatch.close_step`; ``profile`` is the one :meth:`snapshot` gave
        for this step (nothing stamped since: its first five phases were over)."""
        t = self.t
        now = _perf()
        w5 = t[_CHECKPOINT] + now - t[_MARK]  # the checkpoint's wall time (t[5] is reset)
        t[_MARK] = now
        span = t[_SPAN]
        t[_SPAN] = now  # the next step's span starts
        clock = thread_clock
        if now - clock.at > ANCHOR_NS:
            clock.anchor(now, self.clock, _calibration, self.tolerance)
        if profile is None:  # (snapshot() always gives one): the step's figures are dropped
            t[0:18] = _ZEROS
            t[30:36] = t[37:43] = _ZERO6  # (not t[36]: the next span's start)
            t[_SPLIT] = 0
            return
        # Only the checkpoint changed since snapshot(): its first five phases were over
        # (and may not have been booked in t[0:5], see snapshot).
        w = profile.wall_ns
        wall = (w[0], w[1], w[2], w[3], w[4], w5)
        t[MODEL_NS] += w[1]
        if now - span >= LONG_NS:  # a long span of running time ends: check its CPU
            t[_SPAN] = span
            # A step that waited booked its walls in t (a fast snapshot's first five are 0
            # there: they ran before the wait); one that did not ran all of them in the span.
            self._check(now, (t[0], t[1], t[2], t[3], t[4], w5) if t[_SPLIT] else wall)
            t[_SPAN] = now
            profile.wall_ns = wall
            profile.cpu_ns = self._cpu(wall)
            profile.blocked_ns = _blocked(t)
            clock.booked += sum(wall) - sum(t[12:18])  # (the estimated running time)
            t[0:18] = _ZEROS
            t[30:36] = t[37:43] = _ZERO6  # (not t[36]: the next span's start)
            t[_SPLIT] = 0
        elif t[_SPLIT]:
            # So only the checkpoint's CPU is worked out again; the others stand.
            c = profile.cpu_ns
            if not _calibration.scaled:
                cpu5 = w5 - t[17] + t[11]
            else:
                cpu5 = ((w5 - t[17]) * _calibration.scale >> 16) + t[11]
            profile.wall_ns = wall
            profile.cpu_ns = (c[0], c[1], c[2], c[3], c[4], cpu5)
            profile.blocked_ns = _blocked(t)
            clock.booked += sum(wall) - sum(t[12:18])
            t[0:18] = _ZEROS
            t[30:36] = t[37:43] = _ZERO6  # (not t[36]: the next span's start)
            t[_SPLIT] = 0
        elif not _calibration.scaled:
            profile.wall_ns = profile.cpu_ns = wall
            clock.booked += sum(wall)
            t[0:6] = _ZERO6
        else:
            # Not a wait since snapshot() (else the step would be split), so neither the
            # ratio nor the first five phases changed: only the checkpoint grew.
            c = profile.cpu_ns
            profile.wall_ns = wall
            profile.cpu_ns = (c[0], c[1], c[2], c[3], c[4], w5 * _calibration.scale >> 16)
            clock.booked += sum(wall)
            t[0:6] = _ZERO6
        steps = self.steps
        if not steps or steps[-1] is not profile:
            steps.append(profile)
        if self.sink is not None:
            self.sink(profile)

    def settle(self) -> None:
        """Book the time so far; no clock is read (the figures are estimates)."""
        self.fold()
        t = self.t
        now = _perf()
        t[_CHECKPOINT] += now - t[_MARK]
        t[_MARK] = now

    def finish(self) -> None:
        """The drive stops: a slice being measured ends here."""
        if self.t[_SLICE_CPU] >= 0:
            self._calibrate(_perf())

    def _cpu(self, wall: tuple[int, ...]) -> tuple[int, ...]:
        """CPU per phase: running time times the ratio, plus CPU booked from off the loop."""
        t = self.t
        # Spelled out, in integers: a comprehension is a call on 3.11, a float an object.
        if not _calibration.scaled:
            return (
                wall[0] - t[12] + t[6],
                wall[1] - t[13] + t[7],
                wall[2] - t[14] + t[8],
                wall[3] - t[15] + t[9],
                wall[4] - t[16] + t[10],
                wall[5] - t[17] + t[11],
            )
        q = _calibration.scale
        return (
            ((wall[0] - t[12]) * q >> 16) + t[6],
            ((wall[1] - t[13]) * q >> 16) + t[7],
            ((wall[2] - t[14]) * q >> 16) + t[8],
            ((wall[3] - t[15]) * q >> 16) + t[9],
            ((wall[4] - t[16]) * q >> 16) + t[10],
            ((wall[5] - t[17]) * q >> 16) + t[11],
        )

    def _check(self, now: int, walls: tuple[int, ...] | list[int]) -> None:
        """A span of running time at least :data:`LONG_NS` long ends at ``now``: book what
        the CPU clock says it ran as its phases' CPU, and what it did not run as blocked
        (less the preemption the thread's ratio predicts: that is waiting for the CPU).
        ``walls``: the phases' wall times now (bases: ``t[37:43]``, at the span's start)."""
        t = self.t
        start = t[_SPAN]
        ran = now - start
        t[_SPAN] = now
        t[_SLICE_CPU] = -1  # a sampled slice this long is measured here, not a sample
        t[_SPLIT] = 1
        spans = [max(0, walls[p] - t[37 + p]) for p in _PHASES]
        t[37:43] = walls[0:6]
        total = sum(spans)
        if total <= 0:
            return
        clock = thread_clock
        spent = clock.spent_since(start, now, self.clock)
        if spent is None:  # no bound (another thread's anchor): the estimate stands
            return
        spent = min(spent, ran)
        blocked = clock.blocked(start, spent, ran - spent) if spent < ran else 0
        clock.checked(now, _calibration, self.tolerance)  # (after: blocked reads its base)
        cpus, blocks = _split(spans, spent, blocked)
        for p in _PHASES:
            if spans[p]:
                t[12 + p] += spans[p]  # not estimated: measured
                t[6 + p] += cpus[p]
                t[_BLOCKED + p] += blocks[p]

    def _open_slice(self) -> None:
        """A synchronous slice starts (at ``t[_MARK]``, just stamped): measure it if it is
        the one in :data:`SAMPLE_EVERY`."""
        cal = _calibration
        cal.slices += 1
        t = self.t
        t[_SPAN] = t[_MARK]
        if t[_MARK] - thread_clock.at > ANCHOR_NS:
            thread_clock.anchor(t[_MARK], self.clock, cal, self.tolerance)
        if cal.slices % SAMPLE_EVERY == 0:
            t[_SLICE_START] = t[_MARK]
            t[_SLICE_CPU] = self.clock()
        else:
            t[_SLICE_CPU] = -1

    def _calibrate(self, now: int) -> None:
        """The measured slice ends at ``now``: fold its CPU/running ratio into the average."""
        t = self.t
        spent = self.clock() - t[_SLICE_CPU]
        running = now - t[_SLICE_START]
        t[_SLICE_CPU] = -1
        if running > 0:  # a moving average over the measured slices, at most 1
            cal = _calibration
            cal.set(0.8 * cal.sampled + 0.2 * min(1.0, spent / running), self.tolerance)


# What every NoStopwatch holds: figures that stay zero (the driver reads them) and no steps.
# Shared, written with zeros only (the step loop's stamps, NoStopwatch.stamp: int() reads
# no clock): a run without a profile holds no list of its own for them.
_IDLE_FIGURES: list[int] = _figures()
_NO_STEPS: list[StepProfile] = []


class NoStopwatch(Stopwatch, gc=False):
    """``Engine(profile=False)``: the same calls, no clock read, no profile."""

    #: The step loop's stamps read no clock: they write 0, "not stamped".
    stamp: ClassVar[Callable[[], int]] = int

    @classmethod
    def start(
        cls,
        clock: Callable[[], int],
        sink: Callable[[StepProfile], None] | None = None,
        steps: list[StepProfile] | None = None,
    ) -> Stopwatch:
        return cls(clock, None, _IDLE_FIGURES, _NO_STEPS)

    def fold(self) -> None:
        pass

    def lap(self, phase: int) -> None:
        pass

    def suspend(self, phase: int) -> None:
        pass

    def resume(self, phase: int) -> None:
        pass

    def add_cpu(self, phase: int, ns: int) -> None:
        pass

    def add_blocked(self, phase: int, ns: int) -> None:
        pass

    def carry(self, profile: StepProfile) -> None:
        pass

    def snapshot(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        return None

    def close_step(self, profile: StepProfile | None) -> None:
        pass

    def close_new(self, step: int, tool_calls: int, ttft_ns: int) -> StepProfile | None:
        return None

    def settle(self) -> None:
        pass

    def finish(self) -> None:
        pass
