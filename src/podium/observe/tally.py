"""What the metrics hook files per step, and the bulk arithmetic that folds it.

The hook runs once per step on the engine's hot path. It appends the step's twelve
phase figures to two flat lists of its (agent, model) (``+=`` of the profile's tuples:
C-level, no object made) and each tool call's latency to a list per tool; only a call
that failed or did not succeed at its first attempt is kept whole. Every
:data:`COMPACT_AT` steps, while those figures are still in the CPU's caches, they are
compacted into :class:`StepFigures`: a strided slice per phase, bucketed and summed in
C, no Python loop per value. The metrics fold reads those every second. (Folding a
second's worth of profiles at once, long gone from the caches, cost more than the hook.)

The CPU figures are the step's as it ended (see :mod:`podium.engine.stopwatch`): exact
for a step that waited, its running time for one that did not (equal to its CPU unless
the OS preempted the thread).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from podium.engine.profile import STEP_PHASES

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.tools.executor import ToolResult

__all__ = ("BOUNDS_NS", "COMPACT_AT", "PHASE_BUCKETS", "Buckets", "RunEnds", "StepFigures",
           "StepTally", "ToolFigures")

#: Seconds; from a 50 µs CPU slice to a minute-long tool call.
PHASE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The same bounds in nanoseconds, the unit the profiles measure in.
BOUNDS_NS = tuple(int(b * 1e9) for b in PHASE_BUCKETS)
#: Steps a tally files before compacting them (a few hundred: still in the CPU's caches).
COMPACT_AT = 256


def bucket_of(value_ns: int) -> int:
    """The index of the bucket of ``value_ns`` (``le`` buckets; the last is +Inf)."""
    return bisect.bisect_left(BOUNDS_NS, value_ns)


class Buckets:
    """Bucket counts and the sum of many nanosecond values, with no Python loop per value.

    The values are sorted (in C: for a few hundred ints, cheaper than the two C-level
    passes a filter by bounds takes, and a filter misses as soon as one outlier shows) and
    cut with one bisect per bucket bound between the smallest and the largest; the values
    of one phase mostly fall in one bucket or two, so that is a bisect or two."""

    __slots__ = ("counts", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_NS) + 1)  # the last: +Inf
        self.total_ns = 0

    def add(self, values_ns: Sequence[int]) -> None:
        n = len(values_ns)
        if not n:
            return
        ordered = sorted(values_ns)
        self.total_ns += sum(ordered)
        counts, bisect_right = self.counts, bisect.bisect_right
        first, last = bucket_of(ordered[0]), bucket_of(ordered[-1])
        seen = 0
        for i in range(first, last):  # `le` buckets: a value on a bound is in that bound's
            upto = bisect_right(ordered, BOUNDS_NS[i], seen)
            counts[i] += upto - seen
            seen = upto
        counts[last] += n - seen

    def merge(self, other: Buckets) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total_ns += other.total_ns

    def observe_into(self, child: Any) -> None:
        """Add the counts to one histogram child at once, instead of one ``observe`` per value.
        Uses the child's per-bucket values (non-cumulative in prometheus-client), which is
        what ``observe`` increments; the tests scrape and parse the result."""
        if not any(self.counts):
            return
        for bucket, n in zip(child._buckets, self.counts, strict=True):
            if n:
                bucket.inc(n)
        child._sum.inc(self.total_ns / 1e9)


class ToolFigures:
    """One tool's calls: latency buckets, calls by outcome, extra attempts."""

    __slots__ = ("buckets", "outcomes", "retries")

    def __init__(self) -> None:
        self.buckets = Buckets()
        self.outcomes: dict[str, int] = {}
        self.retries = 0

    def add(self, walls_ns: list[int], odd: list[ToolResult]) -> None:
        """``walls_ns``: every call's latency; ``odd``: the calls that did not succeed at
        their first attempt (failed, retried, refused), the only ones read one by one."""
        self.buckets.add(walls_ns)
        outcomes = self.outcomes
        failed = 0
        for r in odd:
            if not r.ok:
                failed += 1
                outcome = r.error or "error"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if r.attempts > 1:
                self.retries += r.attempts - 1
        if failed < len(walls_ns):
            outcomes["ok"] = outcomes.get("ok", 0) + len(walls_ns) - failed

    def merge(self, other: ToolFigures) -> None:
        self.buckets.merge(other.buckets)
        for outcome, n in other.outcomes.items():
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n
        self.retries += other.retries


class StepFigures:
    """What the metrics report of some steps of one (agent, model): how many, wall-time
    buckets and CPU nanoseconds per phase, the times to first token, each tool's figures."""

    __slots__ = ("cpu_ns", "steps", "tools", "ttft", "walls")

    def __init__(self) -> None:
        self.steps = 0
        self.walls = [Buckets() for _ in STEP_PHASES]
        self.cpu_ns = [0] * len(STEP_PHASES)
        self.ttft = Buckets()
        self.tools: dict[str, ToolFigures] = {}

    def merge(self, other: StepFigures) -> None:
        self.steps += other.steps
        for mine, theirs in zip(self.walls, other.walls, strict=True):
            mine.merge(theirs)
        self.cpu_ns = [a + b for a, b in zip(self.cpu_ns, other.cpu_ns, strict=True)]
        self.ttft.merge(other.ttft)
        for name, tool in other.tools.items():
            if name in self.tools:
                self.tools[name].merge(tool)
            else:
                self.tools[name] = tool


class StepTally:
    """The steps of one (agent, model): filed by the metrics hook as each ends, compacted
    into :attr:`figures` every :data:`COMPACT_AT` steps and when the metrics fold."""

    __slots__ = ("agent", "cpus", "figures", "model", "odd", "steps", "tools", "ttfts", "walls")

    def __init__(self, agent: str, model: str) -> None:
        self.agent = agent
        self.model = model
        self.figures = StepFigures()
        #: Steps filed since the last compaction.
        self.steps = 0
        #: Six figures a step (STEP_PHASES order), wall and CPU nanoseconds; none for a step
        #: the engine kept no profile of (``Engine(profile=False)``): counted, not timed.
        self.walls: list[int] = []
        self.cpus: list[int] = []
        #: Times to first token of the streamed model calls.
        self.ttfts: list[int] = []
        #: Per tool, its calls' latencies; and the calls that failed or took other than one
        #: attempt (read one by one at the compaction: the rest are counted as ``ok``).
        self.tools: dict[str, list[int]] = {}
        self.odd: list[ToolResult] = []

    def compact(self) -> None:
        """Fold the steps filed since the last call into :attr:`figures`."""
        figures, n = self.figures, len(STEP_PHASES)
        walls, cpus = self.walls, self.cpus
        figures.steps += self.steps
        if walls:
            for i, buckets in enumerate(figures.walls):
                buckets.add(walls[i::n])
            figures.cpu_ns = [total + sum(cpus[i::n]) for i, total in enumerate(figures.cpu_ns)]
        if self.ttfts:
            figures.ttft.add(self.ttfts)
        if self.tools:
            odd: dict[str, list[ToolResult]] = {}
            for result in self.odd:
                odd.setdefault(result.name, []).append(result)
            for name, tool_walls in self.tools.items():
                tool = figures.tools.get(name)
                if tool is None:
                    tool = figures.tools[name] = ToolFigures()
                tool.add(tool_walls, odd.get(name, []))
        self.steps = 0
        self.walls, self.cpus, self.ttfts, self.tools, self.odd = [], [], [], {}, []

    def take(self) -> StepFigures:
        """The figures of the steps filed since the last call; the tally starts afresh."""
        self.compact()
        figures, self.figures = self.figures, StepFigures()
        return figures


class RunEnds:
    """The runs that ended since the last fold, counted as each ends (while its record is
    in the CPU's caches). By (agent, status, reason, pool): how many, their tokens (input,
    output) and the time each waited in the queue."""

    __slots__ = ("ends",)

    def __init__(self) -> None:
        self.ends: dict[tuple[str, str, str | None, str], _End] = {}

    def add(self, record: RunRecord) -> None:
        key = (record.agent, record.status, record.reason, record.pool)
        end = self.ends.get(key)
        if end is None:
            end = self.ends[key] = _End()
        end.runs += 1
        usage = record.usage
        end.tokens_in += usage.input_tokens
        end.tokens_out += usage.output_tokens
        profile = record.profile
        if profile is not None:
            end.waits.append(profile.admit_ns)


class _End:
    __slots__ = ("runs", "tokens_in", "tokens_out", "waits")

    def __init__(self) -> None:
        self.runs = self.tokens_in = self.tokens_out = 0
        self.waits: list[int] = []  # admission nanoseconds
