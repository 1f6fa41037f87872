"""``bench_chaos.py --matrix``: one outage of each kind and length, a row each (runs, and
calls repeated). ``chaos`` is bench_chaos's ``Chaos`` (passed in: that module runs as a
script)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

__all__ = ("matrix",)


def _one_outage(args: argparse.Namespace, kind: str, outage_s: float) -> argparse.Namespace:
    """``args`` for one outage of ``kind``: 12 s of load, the outage, 6 s more load. The
    tool calls take ``--tool-delay`` (0.5 s unless given) so that many are in flight
    when the outage begins and complete while Redis is away."""
    one = argparse.Namespace(**vars(args))
    if args.tool_delay is None:
        one.tool_delay = 0.5
    one.outage_kind, one.redis_down, one.redis_every = kind, outage_s, 12.0
    one.kills_apart = True
    one.duration = 12.0 + outage_s + 6.0
    one.settle = max(args.settle, outage_s + 60.0)
    return one


def matrix(args: argparse.Namespace, chaos: Any, kinds: tuple[str, ...]) -> int:
    """One outage of each kind and length; a row each: runs, and calls repeated."""
    rows: list[dict[str, Any]] = []
    if not args.json:
        print(f"{'outage':>16} {'runs ok':>9} {'done in outage':>15} {'repeats':>8} "
              f"{'SIGKILLs':>9} "
              f"{'in flight at SIGKILL':>21} {'after checkpoint':>17}  ok")
    for outage_s in args.matrix:
        for kind in kinds:
            one = _one_outage(args, kind, outage_s)
            workdir = Path(tempfile.mkdtemp(prefix=f"podium-chaos-{kind}-"))
            report = asyncio.run(chaos(one, workdir).run())
            row = asdict(report)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{kind + ' ' + format(outage_s, 'g') + ' s':>16} "
                      f"{report.runs_completed:>4}/{report.runs_acknowledged:<4} "
                      f"{report.calls_completed_during_outage:>15} "
                      f"{len(report.calls_repeated_at_redis_outage):>8} "
                      f"{report.worker_kills:>9} {report.calls_repeated_in_flight:>21} "
                      f"{len(report.calls_repeated_after_checkpoint):>17}  {report.ok}",
                      flush=True)
            if args.keep or not report.ok:
                print(f"logs: {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(row["ok"] for row in rows) else 1
