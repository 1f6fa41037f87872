"""The engine's default stopwatch (``clock="sampled"``): each phase's CPU estimated from
its running time and the loop thread's CPU/running ratio, checked against the thread's CPU
clock where a span of running time is long (see :mod:`podium.observe.threadclock`).
Import from :mod:`podium.engine.stopwatch`.
"""

from __future__ import annotations

from podium.engine.exact_stopwatch import (
    _BLOCKED,
    _CHECKPOINT,
    _MARK,
    _PHASES,
    _SLICE_CPU,
    _SPAN,
    _SPLIT,
    _ZERO5,
    _ZERO6,
    _ZEROS,
    MODEL_NS,
    Stopwatch,
    _blocked,
    _perf,
    _split,
)
from podium.engine.profile import StepProfile
from podium.observe.threadclock import ANCHOR_NS, LONG_NS, thread_clock

__all__ = ("SAMPLED_TOLERANCE", "SAMPLE_EVERY", "SampledStopwatch")

#: ``clock="sampled"`` reads the CPU clock around one synchronous slice in this many (each
#: read is a system call; the ratio is the thread's and moves with the machine's load, so
#: at thousands of slices a second one in 32 still measures it many times a second).
SAMPLE_EVERY = 32
#: How far below 1.0 the sampled CPU/running ratio may be and still be taken as 1.0.
SAMPLED_TOLERANCE = 0.02


def _cut(cpu: tuple[int, ...], allowed: int, total: int) -> tuple[int, ...]:
    """A step's CPU figures cut to ``allowed`` in all (of ``total``): more than the thread
    can have spent (:meth:`~podium.observe.threadclock.ThreadClock.take`)."""
    if total <= 0:
        return cpu
    q = (allowed << 16) // total  # (fixed point, spelled out: on a starved host, every step)
    return (cpu[0] * q >> 16, cpu[1] * q >> 16, cpu[2] * q >> 16, cpu[3] * q >> 16,
            cpu[4] * q >> 16, cpu[5] * q >> 16)


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
        t[24:29] = _ZERO5  # booked: a waiting run holds no int for them (see _figures)
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
        spent = now - mark  # (the walls' sum: the step's CPU unless scaled)
        if mark < a < e and spent < LONG_NS and not t[_SPLIT]:
            # The fast lane's step in one slice (see snapshot), its checkpoint included:
            # final at once, and nothing of the step left in t[0:6] to reset. (A long one
            # is checked against the CPU clock: the general path.)
            b, c, d = t[25], t[26], t[27]
            wall = (a - mark, b - a, c - b, d - c, e - d, now - e)
            t[_MARK] = t[_SPAN] = now
            t[MODEL_NS] += wall[1]
            clock = thread_clock
            clock.booked += spent
            since = now - clock.at  # (one subtraction of two clock readings: both are big)
            if since > ANCHOR_NS:
                clock.anchor(now, self.clock, _calibration, self.tolerance)
                since = 0
            cpu: tuple[int, ...] = wall
            if _calibration.scaled:
                q = _calibration.scale
                cpu = (wall[0] * q >> 16, wall[1] * q >> 16, wall[2] * q >> 16,
                       wall[3] * q >> 16, wall[4] * q >> 16, wall[5] * q >> 16)
                spent = spent * q >> 16  # (within a ns a phase of their sum)
            credit = clock.credit - spent
            if credit + since >= 0:  # (ThreadClock.take, inlined: at every step)
                clock.credit = credit
            else:
                cpu = _cut(cpu, clock.take(spent, now), spent)
            profile = StepProfile(step, wall, cpu, tool_calls, ttft_ns)
            self.steps.append(profile)
            if self.sink is not None:
                self.sink(profile)
            return profile
        return super().close_new(step, tool_calls, ttft_ns)

    def close_final(self, step: int, ttft_ns: int) -> StepProfile | None:
        t = self.t
        if t[_SPAN] == t[_MARK]:  # (the step's span of running time starts with the step)
            # The answer's step, stamped to its parse: no tool phases, so its tools' and
            # merge's ends are the parse's, and it closes as close_new closes a tool step.
            # (close_new's general path is settle's too: the checkpoint is booked by then.)
            t[27] = t[28] = t[26]
            return self.close_new(step, 0, ttft_ns)
        return super().close_final(step, ttft_ns)

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
            t[30:36] = t[37:43] = _ZERO6  # (not t[_SPAN]: the next span's start)
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
            t[30:36] = t[37:43] = _ZERO6  # (not t[_SPAN]: the next span's start)
            t[_SPLIT] = 0
            spent = sum(profile.cpu_ns)
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
            t[30:36] = t[37:43] = _ZERO6  # (not t[_SPAN]: the next span's start)
            t[_SPLIT] = 0
            spent = sum(profile.cpu_ns)
        elif not _calibration.scaled:  # the common case: the CPU figures are the walls
            profile.wall_ns = profile.cpu_ns = wall
            spent = sum(wall)  # (what it books as running time, and its CPU)
            clock.booked += spent
            t[0:6] = _ZERO6
        else:
            # Not a wait since snapshot() (else the step would be split), so neither the
            # ratio nor the first five phases changed: only the checkpoint grew.
            c = profile.cpu_ns
            profile.wall_ns = wall
            profile.cpu_ns = (c[0], c[1], c[2], c[3], c[4], w5 * _calibration.scale >> 16)
            clock.booked += sum(wall)
            t[0:6] = _ZERO6
            spent = sum(profile.cpu_ns)
        credit = clock.credit - spent
        if credit >= clock.at - now:  # (ThreadClock.take, inlined: at every step)
            clock.credit = credit
        else:
            profile.cpu_ns = _cut(profile.cpu_ns, clock.take(spent, now), spent)
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
