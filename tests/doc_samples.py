"""What the README and docs/*.md tests share: finding a page's fenced blocks, and running
a Python sample or checking a TOML sample the way a reader would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

__all__ = (
    "DOCS",
    "README",
    "ROOT",
    "assert_links_stay_inside",
    "check_config_sample",
    "fenced",
    "run_python_sample",
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def fenced(path: Path, language: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```LANGUAGE block ("": the plain ``` blocks)."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):  # every block is walked to its end, so that one's
            opened = lines[i].strip()[3:]  # closing fence is never taken for an opening
            start = i + 1
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            if opened == language:
                blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return blocks


def run_python_sample(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The sample on its own, in a fresh interpreter in ``cwd``: no top-level ``await``, no
    names from elsewhere, unclosed resources and dev-mode warnings shown on stderr."""
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_config_sample(code: str, tmp_path: Path) -> None:
    """A ```toml block loads as ``podium.toml`` (a bench scenario, or ``[[agents]]`` that
    use a model the page declares in another block, are left to their own tests)."""
    from podium.config import load_config

    data = tomllib.loads(code)
    if "load" in data or "script" in data:
        return  # a bench scenario, checked by the scenario tests
    if any(a.get("model") for a in data.get("agents", [])) and "models" not in data:
        return  # a fragment: the [[agents]] that use a model declared elsewhere on the page
    file = tmp_path / "podium.toml"
    file.write_text(code)
    load_config(file, environ={})


LINK = re.compile(r"\]\(([^)\s]+)\)")


def assert_links_stay_inside(path: Path) -> None:
    """Every relative link of the page names a file of the repository."""
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        resolved = (path.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{path.name} links outside: {target}"
        assert resolved.exists(), f"{path.name} links to a missing file: {target}"
