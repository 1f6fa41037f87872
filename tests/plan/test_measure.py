"""What a measurement of workers reports: its p99's interval from the runs in arrival
order, its wake-ups per run, and workers started ahead of the machine's other work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from podium.plan.check import _combine, _in_arrival_order
from podium.plan.loadgen import LoadResult
from podium.plan.priority import spawn


def _result(latencies: list[float], wakeups: int = 0) -> LoadResult:
    return LoadResult(latencies_s=latencies, wall_s=10.0, cpu_s=5.0, failed=0,
                      runs=len(latencies), wakeups=wakeups)


def test_workers_latencies_merge_in_arrival_order() -> None:
    a, b = _result([1.0, 2.0, 3.0, 4.0]), _result([10.0, 20.0])
    # Each worker's k-th of n runs at k/n of the span: the workers' runs interleave.
    assert _in_arrival_order([a, b]) == [1.0, 10.0, 2.0, 3.0, 20.0, 4.0]


def test_a_measurement_reports_its_p99_interval_and_wakeups_per_run() -> None:
    calm = [0.2] * 4_000
    # The same latencies, the slow ones together (one stall) or spread out.
    together = list(calm)
    together[1_000:1_060] = [2.0] * 60
    spread = list(calm)
    for i in range(60):
        spread[i * 66] = 2.0
    held = _combine([_result(together, wakeups=400), _result(calm)])
    scattered = _combine([_result(spread, wakeups=400), _result(calm)])
    assert held.p99_s == scattered.p99_s == 0.2
    assert held.wakeups_per_run == pytest.approx(400 / 8_000)
    # One stall is one episode: without it the p99 is 0.2, with it twice 2.0.
    assert held.p99_low_s == 0.2 and held.p99_high_s == 2.0
    # Scattered slow runs are many independent ones: the p99 is 0.2 in nearly every resample.
    assert scattered.p99_high_s == 0.2


def _sleeper() -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-c", "import time; time.sleep(60)"])[0]


@pytest.mark.slow  # starts processes
def test_spawn_with_a_priority_starts_its_own_session_at_that_nice_value() -> None:
    plain = _sleeper()
    # A lower priority than ours (a higher nice value) needs no privilege.
    lowered, ok = spawn([sys.executable, "-c", "import time; time.sleep(60)"], 7)
    try:
        assert os.getsid(plain.pid) == os.getsid(0)
        assert os.getsid(lowered.pid) == lowered.pid  # a session (an autogroup) of its own
        assert ok
        autogroup = Path(f"/proc/{lowered.pid}/autogroup")
        if autogroup.exists():
            assert autogroup.read_text().split()[-1] == "7"
        else:
            assert os.getpriority(os.PRIO_PROCESS, lowered.pid) == 7
    finally:
        for proc in (plain, lowered):
            proc.kill()
            proc.wait()
