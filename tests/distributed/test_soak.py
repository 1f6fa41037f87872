"""A 45-second run of ``bench/bench_soak.py``: steady load through ``podium serve`` and
``podium worker --procs 2`` with workers SIGKILLed and Redis restarted, finished runs
expiring after 3 s.

The bench is the long version (its slopes need minutes); this pins what 45 s can show:
nothing lost, no checkpointed call repeated, and the finished runs leaving the index as
they expire rather than piling up. (It was a minute at 4 runs/s; 45 s at 5 runs/s still
has three kills, a Redis restart and over 200 runs, and the index at the end holds the
runs of the last TTL and reaper period, 10 s, at most: about 70, under half.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_short_soak_loses_nothing_and_keeps_only_recent_runs() -> None:
    cmd = [
        sys.executable, str(ROOT / "bench" / "bench_soak.py"), "--json",
        "--minutes", "0.75", "--sample-s", "5", "--rate", "5", "--ttl", "3",
        "--kill-every", "14", "--redis-every", "25", "--redis-down", "1", "--settle", "60",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150, check=False)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["worker_kills"] >= 2 and report["redis_restarts"] >= 1, report
    submitted = report["runs_submitted"]
    assert submitted > 100, report
    assert report["runs_lost"] == [] and report["runs_failed"] == [], report
    assert report["runs_completed"] == submitted
    assert report["calls_repeated_after_checkpoint"] == [], report
    indexed = [s["runs_indexed"] for s in report["samples"] if s["runs_indexed"] is not None]
    # every run ever submitted stays indexed without the reaper; with it, those of the
    # last TTL + a reaper period or two (the period is 10 s)
    assert indexed and indexed[-1] < submitted / 2, indexed
    assert all(s["rss_kb"].get("gateway") for s in report["samples"]), report["samples"]
