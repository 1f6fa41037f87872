"""Instruction counts under callgrind, for the benchmarks that want a figure without noise."""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

#: Set for the ``--inner`` runs of ``--cache``: automatic garbage collection off.
_GC_OFF = "PODIUM_CALLGRIND_GC_OFF"


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind")


def _counts(script: str, args: Sequence[str], cache: bool) -> tuple[int, int]:
    """Instructions and (with ``cache``) level-1 data-cache misses of ``python script
    args…``; the cache simulated is this machine's (valgrind reads its geometry)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--cache-sim={'yes' if cache else 'no'}",
                f"--callgrind-out-file={os.path.join(tmp, 'cg.out')}",
                sys.executable,
                script,
                *args,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if refs is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    misses = re.search(r"D1\s+misses:\s+([\d,]+)", out.stderr) if cache else None
    if cache and misses is None:
        raise SystemExit(f"no D1 miss count in valgrind's output:\n{out.stderr[-2000:]}")
    return _number(refs), 0 if misses is None else _number(misses)


def _number(match: re.Match[str]) -> int:
    return int(match.group(1).replace(",", ""))


def per_step(
    script: str, variant: str, small: int, large: int, steps: int, cache: bool = False
) -> tuple[float, float]:
    """Instructions and (with ``cache``) D1 misses one more step costs: ``script --inner
    variant N`` run with ``large`` and ``small`` runs of ``steps`` steps, start-up and
    imports cancelled out."""
    big = _counts(script, ("--inner", variant, str(large)), cache)
    few = _counts(script, ("--inner", variant, str(small)), cache)
    extra = (large - small) * steps
    return (big[0] - few[0]) / extra, (big[1] - few[1]) / extra


def per_step_cli(
    doc: str,
    script: str,
    workload: Callable[[str, int], Coroutine[Any, Any, None]],
    option: str,
    default: str,
    steps: int,
    baseline: str,
    versus: Callable[[float, float], str],
) -> None:
    """The command line both instruction benches share: ``--small``, ``--large``,
    ``--OPTION`` (variants, comma-separated) and ``--cache``. Measures each variant's
    instructions per step and prints it as it comes, then each other variant against
    ``baseline`` (``versus(count, baseline_count)``). The ``--inner`` run (this process
    under valgrind) runs ``workload(variant, runs)`` under uvloop instead.

    ``--cache`` also simulates this machine's caches and prints the level-1 data-cache
    misses per step: how much more than its cache a step touches (code, objects, types),
    which instruction counts do not show and CPU time does. Automatic garbage collection
    is off in those runs (a collection comes or not with tiny differences, and each
    sweeps the young objects through the cache)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument(f"--{option}", default=default)
    parser.add_argument("--cache", action="store_true")
    parser.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        import uvloop

        if os.environ.get(_GC_OFF):
            gc.disable()
        uvloop.run(workload(args.inner[0], int(args.inner[1])))
        return
    require_valgrind()
    if args.cache:
        os.environ[_GC_OFF] = "1"  # for the inner runs
    counts: dict[str, float] = {}
    for variant in getattr(args, option).split(","):
        counts[variant], misses = per_step(
            script, variant, args.small, args.large, steps, args.cache
        )
        line = f"{variant:>8}: {counts[variant] / 1e3:6.1f}k instructions per step"
        if args.cache:
            line += f", {misses:6.0f} D1 misses per step"
        print(line, flush=True)
    base = counts.get(baseline)
    if base:
        for variant, count in counts.items():
            if variant != baseline:
                print(f"{variant:>8} {versus(count, base)}")

