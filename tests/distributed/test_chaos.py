"""A short run of ``bench/bench_chaos.py``: workers SIGKILLed and Redis SIGKILLed and
restarted while runs with parallel side-effecting tool calls go through the gateway.

The bench is the longer version users run; this pins its verdict on a schedule that fits
the suite: two Redis outages and several worker kills in about 20 seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_chaos_loses_nothing_and_repeats_no_checkpointed_call() -> None:
    cmd = [
        sys.executable, str(ROOT / "bench" / "bench_chaos.py"), "--json",
        "--duration", "14", "--runs", "60", "--procs", "2", "--kill-every", "2.5",
        "--redis-every", "6", "--redis-down", "1.5", "--settle", "60",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=110, check=False)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["worker_kills"] >= 3 and report["redis_kills"] >= 2, report
    assert report["runs_acknowledged"] == 60, report
    assert report["runs_completed"] == 60, report["runs_not_completed"]
    assert report["orphan_runs"] == [] and report["duplicate_runs_per_key"] == 0, report
    assert report["calls_missing"] == 0, report
    assert report["calls_repeated_after_checkpoint"] == [], report
    assert report["steps_journaled_twice"] == [] and report["runs_finished_twice"] == [], report
    assert report["dead_letters"] == 0, report
    assert report["ok"] is True and done.returncode == 0, done.stderr
