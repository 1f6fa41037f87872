"""Prompt-injection screening: cost per KB, detection and false-positive rates.

- cost: the heuristic screener over benign text (README paragraphs, the examples' kind
  of tool results, joined into ~1, 4 and 16 KB results) and over injected text, in µs per
  KB of UTF-8, for each anchor engine installed (Hyperscan, and the Aho-Corasick fallback;
  target ≤ 5 µs/KB). Each row is the median of ``--rounds`` rounds with its interquartile
  range, and, measured in the same rounds on the same texts, its ratio to two baselines
  whose cost any machine can measure: ``str.lower()`` of the text and ``json.loads`` of
  the text as a JSON string (median of the per-round ratios, which a load that comes and
  goes affects less than the µs);
- rates: detection on the known injection strings, false positives on benign text
  (tests/security/injection_corpus.py);
- engine: CPU µs per step of a ReAct agent with screening off and on (``flag``).

    python bench/bench_screening.py [--rounds 9] [--engine hyperscan|aho-corasick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "security"))

from injection_corpus import BENIGN_PROSE, INJECTIONS, readme_paragraphs

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.security import heuristics
from podium.security.anchors import anchor_scanner, available_engines
from podium.security.heuristics import HeuristicScreener
from podium.security.screen import ScreeningPolicy
from podium.store.memory import MemoryRunStore


def use_engine(engine: str) -> None:
    heuristics._SCANNER = anchor_scanner(
        heuristics._ANCHORS, heuristics._GUARDS, heuristics._STOPS, engine
    )


def cost(texts: list[str], rounds: int) -> dict[str, float]:
    """µs per KB of screening ``texts``, and its ratios to lowering and JSON-decoding them,
    the three timed in turn within each round."""
    screen = HeuristicScreener().screen
    size_kb = sum(len(t.encode()) for t in texts) / 1024
    texts = texts * max(1, round(256 / size_kb))  # a round long enough for the clock
    size_kb = sum(len(t.encode()) for t in texts) / 1024
    docs = [json.dumps(t) for t in texts]

    def timed(work: Callable[[], object]) -> float:
        t0 = time.perf_counter_ns()
        work()
        return (time.perf_counter_ns() - t0) / 1e3 / size_kb

    jobs: dict[str, Callable[[], object]] = {
        "screen": lambda: [screen(t) for t in texts],
        "lower": lambda: [t.lower() for t in texts],
        "json": lambda: [json.loads(d) for d in docs],
    }
    for job in jobs.values():  # warm caches and the scanner's scratch space
        job()
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    for r in range(rounds):
        names = list(jobs)
        for name in names[r % 3 :] + names[: r % 3]:  # rotate who goes first
            samples[name].append(timed(jobs[name]))
    us = samples["screen"]
    q1, _, q3 = statistics.quantiles(us, n=4) if len(us) > 1 else (us[0], 0.0, us[0])

    def ratio(baseline: str) -> float:
        per_round = (a / b for a, b in zip(us, samples[baseline], strict=True))
        return round(statistics.median(per_round), 2)

    return {
        "us_per_kb": round(statistics.median(us), 2),
        "p25": round(q1, 2),
        "p75": round(q3, 2),
        "x_lower": ratio("lower"),
        "x_json_loads": ratio("json"),
    }


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


def corpora() -> dict[str, list[str]]:
    benign = [*BENIGN_PROSE, *readme_paragraphs()]
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
    return {
        **{f"benign_{n // 1024}kb": chunks(benign, n) for n in (1024, 4096, 16384)},
        "example_pages_1kb": chunks(pages(), 1024),
        "order_json_1kb": chunks(orders, 1024),
        "injections": list(INJECTIONS),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument(
        "--engine", choices=available_engines(), help="only this anchor engine (default: each)"
    )
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    engines = [opts.engine] if opts.engine else list(available_engines())
    benign = [*BENIGN_PROSE, *readme_paragraphs()]
    h = HeuristicScreener()
    texts = corpora()
    result: dict[str, Any] = {
        "detection": sum(any(f.score >= 0.5 for f in h.screen(t)) for t in INJECTIONS)
        / len(INJECTIONS),
        "false_positive": sum(any(f.score >= 0.5 for f in h.screen(t)) for t in benign)
        / len(benign),
        "n_injections": len(INJECTIONS),
        "n_benign": len(benign),
        "engines": engines,
        "cost": {},
    }
    default = heuristics._SCANNER
    for engine in engines:
        use_engine(engine)
        result["cost"][engine] = {name: cost(t, opts.rounds) for name, t in texts.items()}
    heuristics._SCANNER = default
    off = [asyncio.run(step_cpu_us(None, opts.runs)) for _ in range(3)]
    on = [asyncio.run(step_cpu_us(ScreeningPolicy(), opts.runs)) for _ in range(3)]
    result["step_cpu_us"] = {"off": round(min(off), 1), "on": round(min(on), 1)}
    if opts.json:
        print(json.dumps(result))
        return 0
    print(
        f"detection {result['detection']:.1%} of {len(INJECTIONS)} injections; "
        f"false positives {result['false_positive']:.1%} of {len(benign)} benign texts"
    )
    print(f"cost, median of {opts.rounds} rounds [interquartile range], and × the same")
    print("text's str.lower() and json.loads() in those rounds:")
    for engine in engines:
        print(f"  anchor pass: {engine}{' (default)' if engine == default.engine else ''}")
        for name, c in result["cost"][engine].items():
            print(
                f"  {name:>18}: {c['us_per_kb']:6.2f} µs/KB [{c['p25']:.2f}–{c['p75']:.2f}]"
                f"  {c['x_lower']:5.2f}× lower  {c['x_json_loads']:5.2f}× json.loads"
            )
    print(
        f"engine CPU per step: off {result['step_cpu_us']['off']} µs, "
        f"screening on {result['step_cpu_us']['on']} µs ({default.engine})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
