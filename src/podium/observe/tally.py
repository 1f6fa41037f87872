"""What the metrics hook files per step, and the bulk arithmetic that folds it.

The hook runs once per step on the engine's hot path: a closure per agent (see
:meth:`StepTally.filer`) over its (agent, model)'s lists, so it reads and writes no
attribute of its own. It adds the step's twelve phase figures to one flat list (two
``+=`` of the profile's tuples: C-level, no object made) and each tool call's latency to
a list per tool; only a call that failed or did not succeed at its first attempt is kept
whole. About every :data:`COMPACT_AT` steps (checked as each run starts, not at every
step), while those figures are still in the CPU's caches, they are compacted into
:class:`StepFigures`: a strided slice per phase, bucketed (see :class:`Buckets`) and
summed. The metrics fold reads those every second. (Folding a second's worth of profiles
at once, long gone from the caches, cost more than the hook.)

A run's end is filed as seven items of a flat list (:data:`END_ITEMS`) and counted at
the fold (:func:`count_ends`): with C-level slices and sums when the runs ended alike.

The CPU figures are the step's as it ended (see :mod:`podium.engine.stopwatch`): with
the default clock, its running time times the thread's measured CPU/running ratio; with
``clock="thread"``, exact for a step that waited and its running time for one that did
not (equal to its CPU unless the OS preempted the thread).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from podium.engine.profile import STEP_PHASES

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.hook import StepHook, TokenCounts
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.tools.executor import ToolResult

__all__ = (
    "BOUNDS_NS",
    "COMPACT_AT",
    "END_ITEMS",
    "PHASE_BUCKETS",
    "TIMED_FULL",
    "Buckets",
    "Ended",
    "StepFigures",
    "StepTally",
    "ToolFigures",
    "count_ends",
)

#: Seconds; from a 50 µs CPU slice to a minute-long tool call.
PHASE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The same bounds in nanoseconds, the unit the profiles measure in.
BOUNDS_NS = tuple(int(b * 1e9) for b in PHASE_BUCKETS)
#: Steps a tally files before compacting them (a few hundred: still in the CPU's caches).
COMPACT_AT = 256
#: Figures a timed step files (wall and CPU per phase).
_PER_STEP = 2 * len(STEP_PHASES)
#: :attr:`StepTally.phases` holds :data:`COMPACT_AT` steps' figures: time to compact.
TIMED_FULL = COMPACT_AT * _PER_STEP
#: Phases only a step that calls tools has: the engine times them in no other step (their
#: wall time is 0 there, and above 0 in any step that called a tool).
_TOOL_PHASES = frozenset({STEP_PHASES.index("tools"), STEP_PHASES.index("merge")})


def bucket_of(value_ns: int) -> int:
    """The index of the bucket of ``value_ns`` (``le`` buckets; the last is +Inf)."""
    return bisect.bisect_left(BOUNDS_NS, value_ns)


class Buckets:
    """Bucket counts and the sum of many nanosecond values, with no Python loop per value
    but one comprehension.

    The values above the first bound are picked out, sorted (in C) and cut with one bisect
    per bucket bound between the smallest and the largest; the values of one phase mostly
    fall in one bucket or two, so that is a bisect or two."""

    __slots__ = ("counts", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_NS) + 1)  # the last: +Inf
        self.total_ns = 0

    def add(self, values_ns: Sequence[int]) -> None:
        """Count ``values_ns``. Most of a phase's values are below the first bound (a step's
        CPU work is a few microseconds): one comprehension counts them (on 3.11 the fastest
        pass over ints there is, ``max`` included), and only the rest is sorted and cut.
        (Sorting all of them cost 2.5 times as much.) A phase that waits for a remote model
        or tool has most of its values above that bound: then the pass is one more read of
        a list the sort reads anyway."""
        n = len(values_ns)
        if not n:
            return
        self.total_ns += sum(values_ns)
        first = BOUNDS_NS[0]
        above = [v for v in values_ns if v > first]
        self.counts[0] += n - len(above)
        if above:
            above.sort()
            self._count_sorted(above)

    def add_sorted(self, ordered: list[int]) -> None:
        """:meth:`add` of values already in order."""
        if ordered:
            self.total_ns += sum(ordered)
            self._count_sorted(ordered)

    def _count_sorted(self, ordered: list[int]) -> None:
        n = len(ordered)
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

    def add(self, walls_ns: Sequence[int], odd: Sequence[ToolResult]) -> None:
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

    __slots__ = ("blocked_ns", "cpu_ns", "steps", "tools", "ttft", "walls")

    def __init__(self) -> None:
        self.steps = 0
        self.walls = [Buckets() for _ in STEP_PHASES]
        self.cpu_ns = [0] * len(STEP_PHASES)
        #: Per phase, the time it held the loop without running (see StepProfile).
        self.blocked_ns = [0] * len(STEP_PHASES)
        self.ttft = Buckets()
        self.tools: dict[str, ToolFigures] = {}

    def merge(self, other: StepFigures) -> None:
        self.steps += other.steps
        for mine, theirs in zip(self.walls, other.walls, strict=True):
            mine.merge(theirs)
        self.cpu_ns = [a + b for a, b in zip(self.cpu_ns, other.cpu_ns, strict=True)]
        self.blocked_ns = [a + b for a, b in zip(self.blocked_ns, other.blocked_ns, strict=True)]
        self.ttft.merge(other.ttft)
        for name, tool in other.tools.items():
            if name in self.tools:
                self.tools[name].merge(tool)
            else:
                self.tools[name] = tool


class StepTally:
    """The steps of one (agent, model): filed by the function :meth:`filer` makes as each
    ends, compacted into :attr:`figures` about every :data:`COMPACT_AT` steps and when the
    metrics fold."""

    __slots__ = (
        "agent", "blocked", "figures", "model", "odd", "phases", "tools", "ttfts", "untimed"
    )

    def __init__(self, agent: str, model: str) -> None:
        self.agent = agent
        self.model = model
        self.figures = StepFigures()
        # The filing functions hold these: the compaction empties them in place.
        #: Twelve figures a step: its six phases' wall, then CPU nanoseconds (STEP_PHASES
        #: order), as the step ended.
        self.phases: list[int] = []
        #: The steps the engine kept no profile of (``Engine(profile=False)``): counted,
        #: not timed (one item each).
        self.untimed: list[None] = []
        #: The blocked figures of the steps that blocked (few do: one tuple each).
        self.blocked: list[tuple[int, ...]] = []
        #: Times to first token of the streamed model calls.
        self.ttfts: list[int] = []
        #: Per tool, its calls' latencies; and the calls that failed or took other than one
        #: attempt (read one by one at the compaction: the rest are counted as ``ok``).
        self.tools: dict[str, list[int]] = {}
        self.odd: list[ToolResult] = []

    def filer(self, owner: Agent, other: Callable[[Agent], StepHook]) -> StepHook:
        """The function that files the steps of ``owner``'s runs here: what the engine
        calls at each step. A step of another agent (after a hand-off) goes to
        ``other(agent)``'s.

        The lists and the dict it files into are bound in the closure: no attribute of the
        tally read or written, the phases' figures added with two C-level ``+=`` of the
        profile's tuples. Whether to compact timed steps is asked per run, not per step
        (:meth:`~podium.observe.metrics.RunMetrics.run_started`, by :data:`TIMED_FULL`)."""
        phases, untimed, tools, compact = self.phases, self.untimed, self.tools, self.compact
        file_ttft, file_untimed, file_odd = self.ttfts.append, untimed.append, self.odd.append
        file_blocked = self.blocked.append

        def step(agent: Agent, record: RunRecord, profile: StepProfile, usage: TokenCounts,
                 results: Sequence[tuple[int, ToolResult]]) -> None:
            nonlocal phases  # ``+=`` rebinds it, to the same list
            if agent is not owner:  # a hand-off: the rest of the run is the other agent's
                other(agent)(agent, record, profile, usage, results)
                return
            wall = profile.wall_ns
            if not wall:  # Engine(profile=False): counted, not timed
                file_untimed(None)
                if len(untimed) >= COMPACT_AT:
                    compact()
            phases += wall  # as the step ended: a CPU tuple is replaced, not changed, when
            phases += profile.cpu_ns  # the stopwatch makes it exact
            if profile.ttft_ns:
                file_ttft(profile.ttft_ns)
            if profile.blocked_ns:  # (an empty tuple: the usual step blocked nothing)
                file_blocked(profile.blocked_ns)
            for _, result in results:  # usually one; a list per tool, not one per call
                try:
                    tools[result.name].append(result.wall_ns)
                except KeyError:  # the tool's first call since the last compaction
                    tools[result.name] = [result.wall_ns]
                if not result.ok or result.attempts != 1:  # failed, retried or refused: rare
                    file_odd(result)

        return step

    def compact(self) -> None:
        """Fold the steps filed since the last call into :attr:`figures`."""
        figures, phases, n = self.figures, self.phases, _PER_STEP
        figures.steps += len(phases) // n + len(self.untimed)
        self.untimed.clear()
        if phases:
            for i, buckets in enumerate(figures.walls):
                walls = phases[i::n]
                if i in _TOOL_PHASES:  # a step that called no tool has no tools or merge phase:
                    walls = [w for w in walls if w]  # no sample (its 0 is no latency)
                buckets.add(walls)
            figures.cpu_ns = [total + sum(phases[i::n])
                              for i, total in enumerate(figures.cpu_ns, len(STEP_PHASES))]
            phases.clear()
        for blocked in self.blocked:
            figures.blocked_ns = [a + b for a, b in zip(figures.blocked_ns, blocked, strict=False)]
        self.blocked.clear()
        if self.ttfts:
            figures.ttft.add(self.ttfts)
            self.ttfts.clear()
        if self.tools:
            odd: dict[str, list[ToolResult]] = {}
            for result in self.odd:
                odd.setdefault(result.name, []).append(result)
            for name, tool_walls in self.tools.items():
                tool = figures.tools.get(name)
                if tool is None:
                    tool = figures.tools[name] = ToolFigures()
                tool.add(tool_walls, odd.get(name, ()))
            self.tools.clear()
            self.odd.clear()

    def take(self) -> StepFigures:
        """The figures of the steps filed since the last call; the tally starts afresh."""
        self.compact()
        figures, self.figures = self.figures, StepFigures()
        return figures


#: Items :meth:`~podium.observe.metrics.RunMetrics.run_finished` files per run: its agent,
#: status, reason and pool, its input and output tokens, and the time it waited in the queue
#: (-1: the engine kept no profile).
END_ITEMS = 7

EndKey = tuple[str, str, "str | None", str]


def count_ends(ends: list[Any]) -> dict[EndKey, Ended]:
    """The runs filed in ``ends`` (:data:`END_ITEMS` each) by (agent, status, reason,
    pool): how many, their tokens and their queue waits. In C-level passes when they all
    ended alike (one agent, one pool, completed: the usual case)."""
    n = END_ITEMS
    keys: list[EndKey] = list(zip(ends[0::n], ends[1::n], ends[2::n], ends[3::n], strict=True))
    if len(dict.fromkeys(keys)) <= 1:
        if not keys:
            return {}
        return {keys[0]: Ended(len(keys), sum(ends[4::n]), sum(ends[5::n]), _waits(ends[6::n]))}
    out: dict[EndKey, Ended] = {}
    for key, tokens_in, tokens_out, wait in zip(keys, ends[4::n], ends[5::n], ends[6::n],
                                                 strict=True):
        end = out.get(key)
        if end is None:
            end = out[key] = Ended(0, 0, 0, [])
        end.runs += 1
        end.tokens_in += tokens_in
        end.tokens_out += tokens_out
        if wait >= 0:
            end.waits.append(wait)
    return out


def _waits(waits: list[int]) -> list[int]:
    return [w for w in waits if w >= 0] if -1 in waits else waits


class Ended:
    """Some runs that ended alike: how many, their tokens and queue waits (nanoseconds)."""

    __slots__ = ("runs", "tokens_in", "tokens_out", "waits")

    def __init__(self, runs: int, tokens_in: int, tokens_out: int, waits: list[int]) -> None:
        self.runs = runs
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.waits = waits
