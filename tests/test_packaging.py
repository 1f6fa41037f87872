"""What the project ships: its license, its version in one place, no stray binaries."""

from __future__ import annotations

import json
import subprocess
import sys
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


def test_import_and_the_cli_parser_load_no_http_client_rich_or_yaml() -> None:
    """``import podium`` and ``podium --help`` (which builds every command's parser) load
    neither aiohttp, nor rich, nor yaml: a third of a second of start-up, all told, that
    every process would pay (each ``podium`` command, each worker) for what only an HTTP
    tool, a backend, a printed table or a YAML scenario needs."""
    code = (
        "import json, sys\n"
        "heavy = ('aiohttp', 'rich', 'yaml')\n"
        "import podium\n"
        "imported = [m for m in heavy if m in sys.modules]\n"
        "from podium.cli.main import build_parser\n"
        "parser = build_parser()\n"
        "parser.format_help()\n"
        "helped = [m for m in heavy if m in sys.modules]\n"
        "print(json.dumps({'import podium': imported, 'podium --help': helped}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out) == {"import podium": [], "podium --help": []}
