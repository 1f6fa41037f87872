"""The first pass's instructions per KB under callgrind, per category of the test corpus.

Wall time on a shared machine is noise; instruction counts are not. The corpus (as
``bench_screen_corpus.py`` builds it, test part) is written once to a JSON file; each
category is then screened under ``valgrind --tool=callgrind`` in ``--small`` and in
``--large`` passes (``FirstPass.screen`` on every text), and the difference, divided by
the extra kilobytes, is what a KB costs, start-up, imports and the first pass's warm-up
cancelled out.

    python bench/bench_screen_instructions.py [--categories benign,json_api,...]
        [--small 1] [--large 3] [--part test]

``benign`` is every benign category together (short texts included), ``attack`` every
attack category with the embedded ones. Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _callgrind import _counts, require_valgrind
from _screen_data import attacks, benign, embedded, short_texts, split, wheel


def _corpus(part_name: str, cache: Path) -> dict[str, list[str]]:
    harmless = benign()
    out: dict[str, list[str]] = {}
    hostile = split(attacks(wheel(cache)), part_name)
    hostile["embedded"] = embedded(hostile, split(harmless, part_name))
    part = split(harmless, part_name)
    part["short"] = short_texts(part)
    out.update(part)
    out["benign"] = [t for texts in part.values() for t in texts]
    out["attack"] = [t for texts in hostile.values() for t in texts]
    return out


def _inner(path: str, category: str, passes: int) -> None:
    from podium.security.first_pass import FirstPass

    texts = json.loads(Path(path).read_text())[category]
    screen = FirstPass().screen
    for _ in range(passes):
        for text in texts:
            screen(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--categories", default="benign")
    parser.add_argument("--part", choices=("test", "dev"), default="test")
    parser.add_argument("--small", type=int, default=1)
    parser.add_argument("--large", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "podium-garak")
    parser.add_argument("--inner", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        _inner(args.inner[0], args.inner[1], int(args.inner[2]))
        return
    require_valgrind()
    corpus = _corpus(args.part, args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "corpus.json")
        Path(path).write_text(json.dumps(corpus))
        for category in args.categories.split(","):
            kb = sum(len(t.encode("utf-8", "surrogatepass")) for t in corpus[category]) / 1024
            counts = [
                _counts(__file__, ("--inner", path, category, str(n)), False)[0]
                for n in (args.small, args.large)
            ]
            per_kb = (counts[1] - counts[0]) / ((args.large - args.small) * kb)
            print(f"{category:>14}: {per_kb / 1e3:7.1f}k instructions per KB ({kb:.0f} KB)")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
