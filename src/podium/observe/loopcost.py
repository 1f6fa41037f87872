"""What an event loop's thread costs beyond its runs' work, and what the host took from it.

Three counters of the calling thread (Linux; zeros elsewhere), read before and after a
load test by ``podium bench`` for ``podium plan``:

- **Wake-ups**: the thread's voluntary context switches. Each is the loop going to sleep
  in its poll with nothing to do and being woken again. A wake-up costs CPU of its own
  (the kernel's switch, the timer, caches gone cold): on a virtual machine tens of µs,
  as much as a step's work. It is paid only when the loop had been idle, so it costs a
  worker idle time, not capacity: a saturated loop never sleeps.
- **Run-queue wait and its episodes** (``/proc/thread-self/schedstat``): the time the
  thread was ready to run but other processes held the CPUs, and how many times it was
  scheduled. On a shared host a wait that ended while the loop was off its core is timed
  until the loop got a core back: that delay is the host's, not the model's or the tool's.

:func:`wake_cpu_s` measures the CPU of one idle wake-up on this loop, here: a loop that
sleeps a couple of milliseconds at a time, timed on the thread's CPU clock.
"""

from __future__ import annotations

import asyncio
import resource
import time

import msgspec

__all__ = ("ThreadCounters", "thread_counters", "wake_cpu_s")


class ThreadCounters(msgspec.Struct, frozen=True):
    #: Voluntary context switches (the loop went to sleep).
    wakeups: int = 0
    #: Seconds ready to run but waiting for a CPU, and the times the thread was scheduled.
    runqueue_s: float = 0.0
    episodes: int = 0

    def __sub__(self, before: ThreadCounters) -> ThreadCounters:
        return ThreadCounters(self.wakeups - before.wakeups,
                              self.runqueue_s - before.runqueue_s,
                              self.episodes - before.episodes)


def thread_counters() -> ThreadCounters:
    """The calling thread's counters so far."""
    try:
        wakeups = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    except (AttributeError, OSError):  # RUSAGE_THREAD is Linux's
        wakeups = 0
    try:
        with open("/proc/thread-self/schedstat") as f:
            fields = f.read().split()
        return ThreadCounters(wakeups, int(fields[1]) / 1e9, int(fields[2]))
    except (OSError, ValueError, IndexError):
        return ThreadCounters(wakeups)


async def wake_cpu_s(wakes: int = 200, sleep_s: float = 0.002) -> float:
    """CPU seconds of one idle wake-up of the running loop: ``wakes`` sleeps of
    ``sleep_s`` with nothing else to do, the thread's CPU over the wake-ups they caused
    (0.0 where none was counted)."""
    before, cpu0 = thread_counters(), time.thread_time()
    for _ in range(wakes):
        await asyncio.sleep(sleep_s)
    cpu = time.thread_time() - cpu0
    woke = (thread_counters() - before).wakeups
    return cpu / woke if woke > 0 else 0.0
