"""Instruction counts under callgrind, for the benchmarks that want a figure without noise."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile


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
