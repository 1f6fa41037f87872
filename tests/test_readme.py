"""The README's promises: it fits a screen (at most 300 lines), every link stays inside the
repository, and the quick start is exactly two commands. Its samples run in
``test_doc_samples.py``, with the docs'."""

from __future__ import annotations

import re

from doc_samples import (
    README,
    assert_links_stay_inside,
)


def test_fits_a_screen() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_links_stay_inside_the_repository() -> None:
    assert_links_stay_inside(README)


def test_quick_start_is_two_commands() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") :]
    quick = quick[: quick.index("\n## ", 5)]
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    assert len(blocks) == 2 and all(b.count("\n") == 1 for b in blocks), blocks
    assert blocks[0].strip().endswith("podium bench")
