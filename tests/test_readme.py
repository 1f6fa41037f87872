"""The README's promises: every Python sample runs as written (each on its own, in a fresh
interpreter, no top-level ``await`` or names from elsewhere), every link stays inside the
repository, and the quick start is exactly two commands. docs/*.md: ``test_docs.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_samples import (
    README,
    assert_links_stay_inside,
    check_config_sample,
    fenced,
    run_python_sample,
)

SAMPLES = [(README, line, code) for line, code in fenced(README, "python")]


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 8


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "line", "code"), SAMPLES, ids=[f"{p.name}:{line}" for p, line, _ in SAMPLES]
)
def test_python_sample_runs_as_written(path: Path, line: int, code: str, tmp_path: Path) -> None:
    if "redis" in code:
        pytest.importorskip("redis")
    out = run_python_sample(code, tmp_path)
    assert out.returncode == 0, f"{path.name}:{line}\n{out.stderr}"
    assert "Unclosed" not in out.stderr, out.stderr


def test_links_stay_inside_the_repository() -> None:
    assert_links_stay_inside(README)


def test_quick_start_is_two_commands() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") :]
    quick = quick[: quick.index("\n## ", 5)]
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert len(blocks) == 2 and all(b.count("\n") == 1 for b in blocks), blocks
    assert blocks[0].strip().endswith("podium bench")


CONFIGS = [(README, line, code) for line, code in fenced(README, "toml")]


@pytest.mark.parametrize(
    ("path", "line", "code"), CONFIGS, ids=[f"{p.name}:{line}" for p, line, _ in CONFIGS]
)
def test_toml_samples_are_valid_configuration(
    path: Path, line: int, code: str, tmp_path: Path
) -> None:
    check_config_sample(code, tmp_path)
