"""What the project ships: its license, its version in one place, no stray binaries."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import podium

ROOT = Path(__file__).resolve().parents[1]


def test_license_file_matches_the_declared_license() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert project["urls"] and any("License ::" not in c for c in project["classifiers"])


def test_version_is_exported() -> None:
    assert podium.__version__.count(".") == 2


def test_no_binaries_are_committed_or_shipped() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [f for f in tracked if f.endswith((".whl", ".tar.gz", ".so", ".zip"))]
    sdist = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["sdist"]
    assert all(not p.endswith(".whl") for p in sdist["include"])
