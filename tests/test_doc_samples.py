"""Every code sample of README.md and docs/*.md runs, the way a reader would run it, so a
sample cannot go stale (the marks that say which run and how: ``doc_samples``).

- A ```python block runs as written, in a fresh interpreter in an empty directory, and
  prints what its comments say it prints: the comment after a ``print(...)`` (or on the
  lines right below it) is the output, ``…`` standing for what varies (run ids). A block
  that prints must say what.
- A ```toml block is a valid ``podium.toml``.
- A shell block marked ``<!-- test: run -->`` runs in bash in a fresh directory, with the
  page's ``<!-- test: file NAME -->`` blocks written there; it must exit 0.
- ``<!-- test: skip (why) -->`` leaves a block out, saying why (fragments, servers that run
  until stopped); the ``podium ...`` lines of every shell block are still parsed
  (tests/test_docs.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from doc_samples import (
    PAGES,
    SHELL,
    Block,
    blocks,
    check_config_sample,
    run_python_sample,
    run_shell_sample,
)

ALL = [b for page in PAGES for b in blocks(page)]
PYTHON = [b for b in ALL if b.language == "python" and b.mark != "skip"]
TOML = [b for b in ALL if b.language == "toml" and b.mark != "skip"]
SHELL_RUN = [b for b in ALL if b.mark == "run"]


def ids(found: list[Block]) -> list[str]:
    return [b.where for b in found]


def test_there_are_samples_of_each_kind() -> None:
    assert len(PYTHON) >= 20 and len(TOML) >= 5 and len(SHELL_RUN) >= 2
    assert all(b.language in SHELL for b in SHELL_RUN), ids(SHELL_RUN)


# --- Python blocks: they run, and print what they say -------------------------------

ELLIPSIS = re.compile(r"\s*(?:…|\.\.\.)\s*")


def output_claims(code: str) -> list[list[str]]:
    """Per commented ``print``, the fragments its output must contain, in order."""
    claims: list[list[str]] = []
    lines = code.splitlines()
    for i, line in enumerate(lines):
        if "print(" not in line:
            continue
        comments = [line.split("  # ", 1)[1]] if "  # " in line else []
        for below in lines[i + 1 :]:  # a long claim goes on the comment lines below
            if not below.strip().startswith("# "):
                break
            comments.append(below.strip()[2:])
        claims.extend([f for f in ELLIPSIS.split(text) if f] for text in comments)
    return claims


@pytest.mark.slow
@pytest.mark.parametrize("block", PYTHON, ids=ids(PYTHON))
def test_python_block_runs_and_prints_what_it_says(block: Block, tmp_path: Path) -> None:
    if "redis" in block.code:
        pytest.importorskip("redis")
    out = run_python_sample(block.code, tmp_path)
    assert out.returncode == 0, f"{block.where}\n{out.stderr}"
    assert "Unclosed" not in out.stderr, out.stderr
    claims = output_claims(block.code)
    where = block.where
    assert claims or not out.stdout.strip(), f"{where} prints without saying what:\n{out.stdout}"
    at = 0
    for fragments in claims:
        for fragment in fragments:
            found = out.stdout.find(fragment, at)
            assert found >= 0, f"{where}: {fragment!r} not in the output after {at}:\n{out.stdout}"
            at = found + len(fragment)


# --- TOML blocks ----------------------------------------------------------------------


@pytest.mark.parametrize("block", TOML, ids=ids(TOML))
def test_toml_block_is_valid_configuration(block: Block, tmp_path: Path) -> None:
    check_config_sample(block.code, tmp_path)


# --- shell blocks marked to run ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL_RUN, ids=ids(SHELL_RUN))
def test_shell_block_runs(block: Block, tmp_path: Path) -> None:
    for tool in ("curl", "redis-server"):
        if re.search(rf"(^|\s){tool}\s", block.code) and shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    files = {
        b.argument: b.code
        for b in blocks(block.path)
        if b.mark == "file" and b.line < block.line
    }
    out = run_shell_sample(block, files, tmp_path)
    assert out.returncode == 0, f"{block.where}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    assert "Traceback" not in out.stderr, f"{block.where}\n{out.stderr}"
