"""`podium runs show`'s step timeline in an 80-column terminal: its bars were drawn 40
cells wide whatever the width, so every step's but the first was cut to "…"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli.test_mistakes import Forked

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("columns", [80, 120])
def test_every_steps_bar_is_drawn(tmp_path: Path, columns: int, forked: Forked) -> None:
    wide = {"COLUMNS": str(columns)}
    ran = forked("run", "react", "Find podium", "--store", "runs.sqlite", "--json",
                 cwd=tmp_path, extra_env=wide)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    shown = forked("runs", "show", run_id, "--store", "runs.sqlite", cwd=tmp_path,
                   extra_env=wide)
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\.\d", line)]
    assert len(rows) == 7, shown.stdout
    for row in rows:
        assert len(row) <= columns and "█" in row and not row.rstrip().endswith("…"), row
