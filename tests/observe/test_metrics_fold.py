"""Folding many values into a histogram at once counts exactly what observing each would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from podium.observe.metrics import _observe_many
from podium.observe.tally import BOUNDS_NS, PHASE_BUCKETS


def test_bulk_counts_equal_one_observe_per_value() -> None:
    values = [random.randint(0, 90_000_000_000) for _ in range(3000)]
    values += list(BOUNDS_NS) + [b + 1 for b in BOUNDS_NS] + [0]  # on and past each bound
    registry = CollectorRegistry()
    one = Histogram("one", "each", ["k"], buckets=PHASE_BUCKETS, registry=registry)
    bulk = Histogram("bulk", "at once", ["k"], buckets=PHASE_BUCKETS, registry=registry)
    for v in values:
        one.labels("x").observe(v / 1e9)
    _observe_many(bulk.labels("x"), values)
    text = generate_latest(registry).decode()
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line and not line.startswith("#")}
    for name, value in lines.items():
        if name.startswith("one_") and "created" not in name:
            twin = "bulk_" + name[len("one_"):]
            assert abs(lines[twin] - value) <= 1e-6 * max(1.0, value), (name, value, lines[twin])
