"""Secret scrubbing: what a run with secrets pays to keep them out of what it writes.

- text: :class:`~podium.security.secrets.SecretMatcher` over a text holding no secret
  (the common case: the prefilter's one pass) and over one holding a secret (the pass,
  then the regex), in µs per KB, for 1, 10 and 50 secrets;
- entry: one journal step (a model turn with a tool call and a 2 KB tool result) through
  a run's redactor, in µs, for an agent with one declared secret.

Each figure is the median of ``--rounds`` rounds.

    python bench/bench_secret_scrub.py [--rounds 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from podium.engine.records import StepRecord
from podium.messages import Message, ToolCall
from podium.security.redact import Redactor
from podium.security.secrets import SecretMatcher
from podium.tools.executor import ToolResult

BODY = (
    '{"order": "A-1002", "status": "shipped", "carrier": "DHL", "items": [{"sku": "X-1", '
    '"qty": 2}], "note": "Left the warehouse in Lyon on Monday morning."}\n'
)


def _text(kb: int) -> str:
    return (BODY * (kb * 1024 // len(BODY) + 1))[: kb * 1024]


def _time(fn: Callable[[], object], n: int, rounds: int) -> float:
    """Median µs per call."""
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for count in (1, 10, 50):
        secrets = [f"sk-live-{i:04d}-9f8E7d6C5b4A3z2Y" for i in range(count)]
        matcher = SecretMatcher(secrets)
        for kb in (1, 16):
            clean = _text(kb)
            dirty = clean[: len(clean) // 2] + secrets[-1].upper() + clean[len(clean) // 2 :]
            for kind, text in (("clean", clean), ("with a secret", dirty)):
                us = _time(lambda t=text, m=matcher: m.scrub(t), max(20, 2000 // kb), args.rounds)
                rows.append({"secrets": count, "kb": kb, "text": kind, "us_per_kb": us / kb})
    redact = Redactor({}, frozenset(), ["sk-live-0000-9f8E7d6C5b4A3z2Y"]).for_run()
    call = ToolCall("c1", "lookup", '{"order": "A-1002"}')
    step = StepRecord(
        3, 1.0, Message("assistant", "Let me look.", (call,)),
        (ToolResult("c1", "lookup", _text(2)),),
    )
    entry_us = _time(lambda: redact([step]), 2000, args.rounds)
    if args.json:
        print(json.dumps({"text": rows, "entry_us": entry_us}))
        return
    print("secrets  KB  text           µs/KB")
    for r in rows:
        print(f"{r['secrets']:>7}  {r['kb']:>2}  {r['text']:<13}  {r['us_per_kb']:6.1f}")
    print(f"one journal step (2 KB tool result, 1 declared secret): {entry_us:.1f} µs")


if __name__ == "__main__":
    main()
