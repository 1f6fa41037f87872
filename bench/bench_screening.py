"""Prompt-injection screening: cost per KB, detection and false-positive rates.

- cost: the heuristic screener over benign text (README paragraphs, the examples' kind
  of tool results, joined into ~1, 4 and 16 KB results) and over injected text, in µs per
  KB (median of rounds; target ≤ 5 µs/KB);
- rates: detection on the known injection strings, false positives on benign text
  (tests/security/injection_corpus.py);
- engine: CPU µs per step of a ReAct agent with screening off and on (``flag``).

    python bench/bench_screening.py [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "security"))

from injection_corpus import BENIGN_PROSE, INJECTIONS, readme_paragraphs

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.security.heuristics import HeuristicScreener
from podium.security.screen import ScreeningPolicy
from podium.store.memory import MemoryRunStore


def per_kb(texts: list[str], rounds: int) -> float:
    screen = HeuristicScreener().screen
    size_kb = sum(len(t.encode()) for t in texts) / 1024
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for t in texts:
            screen(t)
        samples.append((time.perf_counter_ns() - t0) / 1e3 / size_kb)
    return statistics.median(samples)


def pages() -> list[str]:
    """The research example's pages as its fetch tool returns them (visible text)."""
    from podium.examples.research import PAGES, _PageText

    out = []
    for path in sorted(PAGES.glob("*.html")):
        page = _PageText()
        page.feed(path.read_text(encoding="utf-8"))
        out.append(page.text)
    return out


def chunks(paragraphs: list[str], size: int) -> list[str]:
    out, cur = [], ""
    for p in paragraphs * 20:
        cur += p + "\n\n"
        if len(cur) >= size:
            out.append(cur)
            cur = ""
    return out


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return "Order A-1002: Mechanical keyboard, $89.00, shipped via UPS 1Z999AA10. " * 12


async def step_cpu_us(policy: ScreeningPolicy | None, runs: int) -> float:
    agent = Agent(
        "react",
        SimulatedModel(Scenario.react("lookup", {"query": "x"}, tool_steps=6)),
        "You are a helpful agent.",
        [lookup],
        max_steps=8,
        screening=policy,
    )
    async with Engine(MemoryRunStore()) as engine:
        c0 = time.process_time()
        records = await asyncio.gather(*(engine.run(agent, "go") for _ in range(runs)))
        cpu = time.process_time() - c0
    steps = sum(r.steps for r in records)
    return cpu / steps * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    benign = [*BENIGN_PROSE, *readme_paragraphs()]
    h = HeuristicScreener()
    result: dict[str, Any] = {
        "detection": sum(any(f.score >= 0.5 for f in h.screen(t)) for t in INJECTIONS)
        / len(INJECTIONS),
        "false_positive": sum(any(f.score >= 0.5 for f in h.screen(t)) for t in benign)
        / len(benign),
        "n_injections": len(INJECTIONS),
        "n_benign": len(benign),
        "us_per_kb": {
            f"benign_{n // 1024}kb": round(per_kb(chunks(benign, n), opts.rounds), 2)
            for n in (1024, 4096, 16384)
        },
    }
    result["us_per_kb"]["example_pages_1kb"] = round(per_kb(chunks(pages(), 1024), opts.rounds), 2)
    orders = [
        msgspec.json.encode(
            {
                "order_id": f"A-{i}",
                "status": "shipped",
                "items": [{"name": "Mechanical keyboard", "price": "$89.00"}],
                "carrier": "UPS",
                "tracking": f"1Z999AA1{i}",
                "eta": "2025-06-12",
            }
        ).decode()
        for i in range(1000, 1400)
    ]
    result["us_per_kb"]["order_json_1kb"] = round(per_kb(chunks(orders, 1024), opts.rounds), 2)
    result["us_per_kb"]["injections"] = round(per_kb(list(INJECTIONS), opts.rounds), 2)
    off = [asyncio.run(step_cpu_us(None, opts.runs)) for _ in range(3)]
    on = [asyncio.run(step_cpu_us(ScreeningPolicy(), opts.runs)) for _ in range(3)]
    result["step_cpu_us"] = {"off": round(min(off), 1), "on": round(min(on), 1)}
    if opts.json:
        print(json.dumps(result))
    else:
        print(
            f"detection {result['detection']:.1%} of {len(INJECTIONS)} injections; "
            f"false positives {result['false_positive']:.1%} of {len(benign)} benign texts"
        )
        for k, v in result["us_per_kb"].items():
            print(f"  {k:>12}: {v:6.2f} µs/KB")
        print(
            f"engine CPU per step: off {result['step_cpu_us']['off']} µs, "
            f"screening on {result['step_cpu_us']['on']} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
