"""The loop thread's CPU clock, read rarely: what keeps long slices true and short ones bounded.

The sampled stopwatch estimates a phase's CPU as its running time (wall time
on the loop, not waiting) times the thread's CPU/running ratio. That is true
for the microsecond slices of ordinary steps, and false for a slice that
holds the loop without using the CPU: an async tool that calls
``time.sleep(0.2)`` runs 200 ms and uses none; a thread the OS preempts for
10 ms in the middle of a parse runs those 10 ms on nobody's CPU. Reading the
CPU clock around every slice would catch both and costs a system call each
(0.5–7 µs on a virtual machine, more under load), several a step.

So the clock is read where it is cheap to read rarely:

* an *anchor*, ``(perf time, thread CPU)``, is taken at the start of a slice or
  a step when the last one is older than :data:`ANCHOR_NS`: at most about five
  hundred reads a second whatever the step rate;
* a span of running time (a slice, or a step inside one) that lasted
  :data:`LONG_NS` or more is checked when it ends: one read, and the thread
  cannot have spent more CPU in it than since the anchor taken at or before its
  start, less the CPU before its start (:meth:`ThreadClock.spent_since`). What it
  ran less than that is time the thread did not run: blocked (a sleep, a
  synchronous read) or preempted.

Shorter spans keep the estimate (running time times the ratio the stopwatch
measures on sampled slices), but never above the bound the clock sets: every
:data:`CALIBRATE_NS`, the thread's CPU since the last time over the running
time booked as CPU meanwhile (all runs' spans, and the tool executor's), so the
phases' CPU cannot add up to more than the thread's — on a busy host too, where
a run whose steps never wait is never a sampled slice. Where Linux offers
per-thread scheduler statistics (``/proc/thread-self/schedstat``), the time the
thread was runnable but not running tells a long span's preemption from its
blocking.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = (
    "ANCHOR_NS",
    "CALIBRATE_NS",
    "CREDIT_NS",
    "LONG_NS",
    "Ratio",
    "ThreadClock",
    "blocked_of",
    "look",
    "split_span",
    "thread_clock",
)

#: How old the anchor may be when a span starts: the error bound of a long span's CPU.
ANCHOR_NS = 2_000_000
#: A span of running time at least this long has its CPU checked against the clock.
LONG_NS = 4_000_000
#: How often the bound on the CPU/running ratio is worked out again.
CALIBRATE_NS = 10_000_000
#: The least running time booked a calibration interval must cover to count: a few
#: microseconds of it say nothing about the ratio.
_MIN_RUNNABLE_NS = 200_000
#: The running time booked in a calibration interval whose measure replaces the bound.
_FULL_WEIGHT_NS = 2_000_000
#: The most CPU of the thread the readings saw that the phases may be given later: the
#: loop's own work (polling, timers) leaves CPU no phase takes, which must not pile up into
#: room for an estimate too high much later.
CREDIT_NS = 10_000_000
_NEVER = -(1 << 62)
_SCHEDSTAT = "/proc/thread-self/schedstat"


class Ratio(Protocol):
    """Where the ratio goes (the stopwatch's calibration)."""

    def bound_by(self, bound: float, tolerance: float) -> None: ...


class ThreadClock:
    """The anchor and the scheduler statistics of the thread that reads them (one per
    process; it follows the thread: a read from another thread starts afresh)."""

    __slots__ = (
        "at", "booked", "bound", "cal_at", "cal_cpu", "cpu", "credit", "delay",
        "delay_at", "fd", "sched_at", "schedstat", "thread",
    )

    def __init__(self) -> None:
        #: The anchor: the perf time it was taken and the thread's CPU clock then.
        self.at = _NEVER
        self.cpu = 0
        self.thread = 0
        #: Whether the scheduler's statistics can be read (None: not tried yet).
        self.schedstat: bool | None = None
        self.fd = -1
        #: The running time the stopwatches and the tool executor booked as CPU on this
        #: thread since the calibration's base (each adds its spans as they end; counted
        #: from the base, not all told: a few milliseconds, an integer Python adds fast).
        self.booked = 0
        #: When the calibration was last looked at; the base of the bound (when, and the
        #: thread's CPU then); the thread's runnable-but-not-running time, from the
        #: scheduler where it tells, and when it was read.
        self.sched_at = self.cal_at = self.delay_at = _NEVER
        self.cal_cpu = 0
        self.delay = 0
        #: The thread's CPU over the running time booked (a moving average, at most 1):
        #: what the CPU of a span too short to measure is, at most, per running ns.
        self.bound = 1.0
        #: The thread's CPU its readings have seen that no phase has been given yet (at most
        #: :data:`CREDIT_NS`): what the phases' CPU figures may still add up to (see
        #: :meth:`take`).
        self.credit = 0

    def reset(self) -> None:
        """Forget the anchor and the last calibration (a test's fake clocks start here)."""
        self.at = self.sched_at = self.cal_at = self.delay_at = _NEVER
        self.thread = 0
        self.bound = 1.0
        self.credit = 0

    def anchor(self, now: int, clock: Callable[[], int], ratio: Ratio | None,
               tolerance: float) -> None:
        """Take the anchor at ``now`` (the caller saw the last one was older than
        :data:`ANCHOR_NS`); every :data:`CALIBRATE_NS` also bound ``ratio`` by the
        thread's CPU over the running time booked since the last time."""
        c = clock()
        ident = threading.get_ident()
        if ident != self.thread:
            self._follow(ident)
        else:
            self.credit = min(CREDIT_NS, self.credit + c - self.cpu)
        self.cpu = c
        self.at = now
        if now - self.sched_at >= CALIBRATE_NS:
            self._calibrate(now, ratio, tolerance)

    def spent_since(self, start: int, now: int, clock: Callable[[], int]) -> int | None:
        """How much CPU this thread spent from ``start`` to ``now`` (perf times), if the
        anchor is this thread's, taken no later than ``start`` and no earlier than
        :data:`ANCHOR_NS` before it; else None. The anchor moves to ``now``.

        Its CPU since the anchor bounds it from above; that less the wall time between
        the anchor and ``start``, from below. Between the two, the CPU before ``start`` is
        taken at the bound's ratio (another run's slice may have run there: a busy host
        would book it twice). The reading is an anchor too: call :meth:`checked` once the
        span is booked, to calibrate as an anchor does (on a busy host most spans are
        long, and their checks leave no anchor stale)."""
        if self.thread != threading.get_ident():
            return None
        at = self.at
        c = clock()
        spent = c - self.cpu
        self.at, self.cpu = now, c
        self.credit = min(CREDIT_NS, self.credit + max(0, spent))
        before = start - at
        if not 0 <= before <= ANCHOR_NS or spent < 0:
            return None
        return max(0, spent - before, spent - int(before * self.bound))

    def take(self, cpu: int, now: int) -> int:
        """How much of ``cpu``, the CPU figures of a span or step that ended at ``now``, the
        thread can have spent: all of it, unless it is more than the CPU the readings saw
        and no phase was given yet, plus the wall time since the last reading (an upper
        bound of the CPU since). So over any stretch of time the phases' CPU adds up to no
        more than the thread's, plus at most :data:`CREDIT_NS`: an estimate too high (the
        ratio lags behind a host that just got busy) is cut, never booked."""
        credit = self.credit - cpu
        floor = self.at - now  # (negative: the wall time since the last reading)
        if credit >= floor:
            self.credit = credit
            return cpu
        allowed = max(0, self.credit - floor)
        self.credit -= allowed
        return allowed

    def checked(self, now: int, ratio: Ratio | None, tolerance: float) -> None:
        """A long span was checked at ``now`` (:meth:`spent_since`, then :meth:`blocked`):
        calibrate if it is time, as :meth:`anchor` would."""
        if now - self.sched_at >= CALIBRATE_NS:
            self._calibrate(now, ratio, tolerance)

    def blocked(self, start: int, spent: int, off: int) -> int:
        """Of ``off``, the time a span from ``start`` that used ``spent`` CPU did not run,
        what was blocked rather than preempted: with the scheduler's statistics, ``off``
        less the time the thread has been runnable but not running since the last reading
        before the span (an upper bound of its preemption in the span: the rest is sure to
        be blocked); without them, less the preemption the ratio predicts."""
        if (self.schedstat and 0 <= start - self.delay_at <= 2 * CALIBRATE_NS
                and self.thread == threading.get_ident()):
            read = self._read()
            if read is not None:
                return max(0, off - (read[1] - self.delay))
        return blocked_of(spent, off, self.bound)

    def _follow(self, ident: int) -> None:
        """Readings from another thread: its own statistics file, no calibration base."""
        self.thread = ident
        self.sched_at = self.cal_at = self.delay_at = _NEVER
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.schedstat is False:
            return
        try:
            self.fd = os.open(_SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self.schedstat = False
            return
        self.schedstat = self._read() is not None

    def _read(self) -> tuple[int, int] | None:
        try:
            fields = os.pread(self.fd, 96, 0).split()
            return int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            return None

    def _calibrate(self, now: int, ratio: Ratio | None, tolerance: float) -> None:
        # The thread's CPU since the last calibration is all it can have spent in the
        # running time booked meanwhile: the loop's own work (its polling, callbacks no
        # stopwatch times) only makes the bound looser, never too low.
        self.sched_at = now
        if self.schedstat:  # (what bounds a long span's preemption: see blocked())
            read = self._read()
            if read is None:
                self.schedstat = False
            else:
                self.delay, self.delay_at = read[1], now
        booked = self.booked
        if self.cal_at != _NEVER:
            if booked < _MIN_RUNNABLE_NS:
                return  # little booked since: keep the base, wait for more
            measured = min(1.0, (self.cpu - self.cal_cpu) / booked)
            # Weighed by how much running time it covers: a few ms of it is the thread's
            # state now (a host that just got busy), a little is noise.
            weight = min(1.0, booked / _FULL_WEIGHT_NS)
            self.bound += weight * (measured - self.bound)
            if ratio is not None:
                ratio.bound_by(self.bound, tolerance)
        self.cal_at, self.cal_cpu = now, self.cpu
        self.booked = 0


#: The process's one: the loop thread's anchor (the stopwatches and the tool executor's).
thread_clock = ThreadClock()


def blocked_of(spent: int, off: int, ratio: float) -> int:
    """Of ``off``, the time a span that used ``spent`` CPU did not run, what was blocked:
    the rest is the preemption a thread given ``ratio`` of its runnable time suffers."""
    preempted = int(spent * (1.0 - ratio) / ratio) if 0.0 < ratio < 1.0 else 0
    return max(0, off - preempted)


def split_span(start: int, now: int) -> tuple[int, int]:
    """``(CPU, blocked)`` of a span of running time from ``start`` to ``now`` on this
    thread (perf times; :func:`look` was called when it started): its wall time and 0,
    unless it is long and the clock says the thread ran less. A short one is its wall time
    times the thread's ratio: on a busy host its wall time is partly preemption. (Booked
    into a step's figures, it is cut with them, if need be, when the step closes.)"""
    ran = now - start
    clock = thread_clock
    if ran < LONG_NS:
        clock.booked += ran
        return int(ran * clock.bound), 0
    spent = clock.spent_since(start, now, time.thread_time_ns)
    if spent is None or spent >= ran:
        clock.checked(now, None, 0.0)
        return ran, 0
    blocked = clock.blocked(start, spent, ran - spent)
    clock.checked(now, None, 0.0)
    return spent, blocked


def look(now: int) -> None:
    """A span starts at ``now``: take a fresh anchor if the last one is too old."""
    if now - thread_clock.at > ANCHOR_NS:
        thread_clock.anchor(now, time.thread_time_ns, None, 0.0)
