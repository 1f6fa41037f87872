"""The README's promises: every Python sample runs as written (each on its own, in a fresh
interpreter, no top-level ``await`` or names from elsewhere), every link stays inside the
repository, and the quick start is exactly two commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def fenced(path: Path, language: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```LANGUAGE block."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == f"```{language}":
            start = i + 1
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return blocks


SAMPLES = [(p, line, code) for p in [README, *DOCS] for line, code in fenced(p, "python")]


def test_there_are_samples() -> None:
    assert len([s for s in SAMPLES if s[0] == README]) >= 8


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "line", "code"), SAMPLES, ids=[f"{p.name}:{line}" for p, line, _ in SAMPLES]
)
def test_python_sample_runs_as_written(path: Path, line: int, code: str, tmp_path: Path) -> None:
    if "redis" in code:
        pytest.importorskip("redis")
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"{path.name}:{line}\n{out.stderr}"
    assert "Unclosed" not in out.stderr, out.stderr


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_links_stay_inside_the_repository(path: Path) -> None:
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        resolved = (path.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{path.name} links outside: {target}"
        assert resolved.exists(), f"{path.name} links to a missing file: {target}"


def test_quick_start_is_two_commands() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") :]
    quick = quick[: quick.index("\n## ", 5)]
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert len(blocks) == 2 and all(b.count("\n") == 1 for b in blocks), blocks
    assert blocks[0].strip().endswith("podium bench")


CONFIGS = [
    (p, line, code)
    for p in [README, ROOT / "docs" / "configuration.md"]
    for line, code in fenced(p, "toml")
]


@pytest.mark.parametrize(
    ("path", "line", "code"), CONFIGS, ids=[f"{p.name}:{line}" for p, line, _ in CONFIGS]
)
def test_toml_samples_are_valid_configuration(
    path: Path, line: int, code: str, tmp_path: Path
) -> None:
    import tomllib

    from podium.config import load_config

    data = tomllib.loads(code)
    if "load" in data or "script" in data:
        return  # a bench scenario, checked by the scenario tests
    if any(a.get("model") for a in data.get("agents", [])) and "models" not in data:
        return  # a fragment: the [[agents]] that use a model declared elsewhere on the page
    file = tmp_path / "podium.toml"
    file.write_text(code)
    load_config(file, environ={})
