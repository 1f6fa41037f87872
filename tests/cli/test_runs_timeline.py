"""`podium runs show`'s step timeline in an 80-column terminal: its bars were drawn 40
cells wide whatever the width, so every step's but the first was cut to "…"."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def podium(*args: str, columns: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODIUM_")}
    env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "podium.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("columns", [80, 120])
def test_every_steps_bar_is_drawn(tmp_path: Path, columns: int) -> None:
    ran = podium("run", "react", "Find podium", "--store", "runs.sqlite", "--json",
                 columns=columns, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    shown = podium("runs", "show", run_id, "--store", "runs.sqlite", columns=columns,
                   cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\.\d", line)]
    assert len(rows) == 7, shown.stdout
    for row in rows:
        assert len(row) <= columns and "█" in row and not row.rstrip().endswith("…"), row
