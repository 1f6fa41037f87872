"""Instruction counts under callgrind, for the benchmarks that want a figure without noise."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind")


def instructions(script: str, *args: str) -> int:
    """Instructions that ``python script args…`` executes (valgrind's ``refs``), with a
    fixed hash seed so that two runs of it agree."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
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
    match = re.search(r"refs:\s+([\d,]+)", out.stderr)
    if match is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def per_step(script: str, variant: str, small: int, large: int, steps: int) -> float:
    """Instructions one more step costs: ``script --inner variant N`` run with ``large``
    and ``small`` runs of ``steps`` steps, start-up and imports cancelled out."""
    extra = instructions(script, "--inner", variant, str(large)) - instructions(
        script, "--inner", variant, str(small)
    )
    return extra / ((large - small) * steps)


def per_step_cli(
    doc: str,
    script: str,
    workload: Callable[[str, int], Coroutine[Any, Any, None]],
    option: str,
    default: str,
    steps: int,
) -> dict[str, float] | None:
    """The command line both instruction benches share: ``--small``, ``--large`` and
    ``--OPTION`` (variants, comma-separated). Measures each variant's instructions per
    step and prints it as it comes; None when this process is the ``--inner`` run (it
    has run ``workload(variant, runs)`` under uvloop)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument(f"--{option}", default=default)
    parser.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        import uvloop

        uvloop.run(workload(args.inner[0], int(args.inner[1])))
        return None
    require_valgrind()
    counts: dict[str, float] = {}
    for variant in getattr(args, option).split(","):
        counts[variant] = per_step(script, variant, args.small, args.large, steps)
        print(f"{variant:>8}: {counts[variant] / 1e3:6.1f}k instructions per step", flush=True)
    return counts
