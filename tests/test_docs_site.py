"""The documentation site builds with ``mkdocs build --strict``: every page of docs/ is in
the nav, every link and anchor between pages resolves, every repository file a page links
to exists (docs/hooks/repo_links.py), and the API reference renders from the docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_samples import ROOT

pytest.importorskip("mkdocs", reason="the docs extra (also in dev): pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="the docs extra (also in dev)")

pytestmark = pytest.mark.slow


def test_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "podium.Engine" in api and "Agent" in api  # mkdocstrings drew the docstrings
    for page in (ROOT / "docs").glob("*.md"):
        built = site / ("" if page.stem == "index" else page.stem) / "index.html"
        assert built.exists(), f"{page.name} is not on the site"
