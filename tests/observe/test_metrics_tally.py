"""The metrics hook files steps and compacts them in bulk: what a scrape then shows equals
what observing every step's figures one by one shows, whichever way the bulk bucketing
goes and however the steps fall across compactions, folds and hand-offs."""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from podium import Agent, FunctionModel
from podium.engine.driver import Engine
from podium.engine.profile import STEP_PHASES, StepProfile
from podium.engine.records import RunRecord
from podium.messages import Usage
from podium.observe.metrics import RunMetrics
from podium.observe.tally import BOUNDS_NS, COMPACT_AT, PHASE_BUCKETS, Buckets
from podium.tools.executor import ToolResult

Parsed = dict[tuple[str, frozenset[tuple[str, str]]], float]
_MODEL = STEP_PHASES.index("model")


def _reference(values: Iterable[int]) -> list[int]:
    counts = [0] * (len(BOUNDS_NS) + 1)
    for v in values:
        counts[bisect.bisect_left(BOUNDS_NS, v)] += 1  # `le` buckets: a bound is its own
    return counts


def _just(values: list[int]) -> list[int]:
    buckets = Buckets()
    buckets.add(values)
    assert buckets.total_ns == sum(values)
    return buckets.counts


@pytest.mark.parametrize("case", ["one bucket", "one bucket, on its bounds", "last bucket",
                                  "dominant with outliers", "spread", "one value"])
def test_bulk_bucketing_counts_what_one_bisect_per_value_does(case: str) -> None:
    rng = random.Random(case)
    b = BOUNDS_NS
    values = {
        "one bucket": [rng.randint(1, b[0]) for _ in range(500)],
        # (b[4], b[5]]: the lower bound belongs to the bucket below, the upper to this one
        "one bucket, on its bounds": [b[4] + 1, b[5], *(rng.randint(b[4] + 1, b[5])
                                                        for _ in range(300))],
        "last bucket": [b[-1] + rng.randint(1, 10**9) for _ in range(200)],
        "dominant with outliers": [rng.randint(b[6] + 1, b[7]) for _ in range(900)]
        + [b[6], b[7] + 1, 0, b[-1] * 2, *b],
        "spread": [rng.randint(0, 90 * 10**9) for _ in range(700)],
        "one value": [b[3]],
    }[case]
    rng.shuffle(values)
    assert _just(values) == _reference(values)
    assert _just([]) == [0] * (len(BOUNDS_NS) + 1)


def _samples(text: str) -> Parsed:
    out: Parsed = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _agent(name: str, model: str) -> Agent:
    return Agent(name, FunctionModel(lambda messages, request: "done", name=model))


def _profile(rng: random.Random, step: int, calls: int) -> StepProfile:
    # CPU-like phases in the lowest buckets with rare outliers; model and tools spread wide.
    walls = tuple(
        rng.randint(10**7, 3 * 10**9) if phase in ("model", "tools") and rng.random() < 0.5
        else rng.randint(1_000, 40_000) if rng.random() < 0.97 else rng.randint(0, 10**8)
        for phase in STEP_PHASES
    )
    cpus = tuple(w // rng.randint(1, 4) for w in walls)
    ttft = rng.randint(10**6, 10**9) if rng.random() < 0.3 else 0
    return StepProfile(step, walls, cpus, calls, ttft)


def _result(rng: random.Random, index: int) -> ToolResult:
    name = rng.choice(["lookup", "search", "fetch"])
    wall = rng.randint(1_000, 5 * 10**9)
    odd = rng.random()
    if odd < 0.05:
        return ToolResult(f"c{index}", name, "", ok=False, error="timeout", attempts=3,
                          wall_ns=wall)
    if odd < 0.08:
        return ToolResult(f"c{index}", name, "", ok=False, error="blocked", attempts=0,
                          wall_ns=wall)
    if odd < 0.12:
        return ToolResult(f"c{index}", name, "ok", attempts=2, wall_ns=wall)
    return ToolResult(f"c{index}", name, "ok", wall_ns=wall)


class _Reference:
    """The same metrics, observed one value at a time."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.phase = Histogram("podium_step_phase_seconds", "", ["agent", "phase"],
                               buckets=PHASE_BUCKETS, registry=r)
        self.cpu = Counter("podium_step_phase_cpu_seconds", "", ["agent", "phase"], registry=r)
        self.model = Histogram("podium_model_call_seconds", "", ["model"],
                               buckets=PHASE_BUCKETS, registry=r)
        self.ttft = Histogram("podium_model_ttft_seconds", "", ["model"],
                              buckets=PHASE_BUCKETS, registry=r)
        self.tool = Histogram("podium_tool_call_seconds", "", ["tool"], buckets=PHASE_BUCKETS,
                              registry=r)
        self.calls = Counter("podium_tool_calls", "", ["tool", "outcome"], registry=r)
        self.retries = Counter("podium_tool_retries", "", ["tool"], registry=r)
        self.steps = Counter("podium_steps", "", ["agent"], registry=r)

    def step(self, agent: Agent, profile: StepProfile, results: list[ToolResult]) -> None:
        self.steps.labels(agent.name).inc()
        for phase, wall, cpu in zip(STEP_PHASES, profile.wall_ns, profile.cpu_ns, strict=False):
            self.phase.labels(agent.name, phase).observe(wall / 1e9)
            self.cpu.labels(agent.name, phase).inc(cpu / 1e9)
        if profile.wall_ns:
            self.model.labels(agent.model.name).observe(profile.wall_ns[_MODEL] / 1e9)
        if profile.ttft_ns:
            self.ttft.labels(agent.model.name).observe(profile.ttft_ns / 1e9)
        for r in results:
            self.tool.labels(r.name).observe(r.wall_ns / 1e9)
            self.calls.labels(r.name, "ok" if r.ok else (r.error or "error")).inc()
            if r.attempts > 1:
                self.retries.labels(r.name).inc(r.attempts - 1)


def _assert_same(metrics: RunMetrics, registry: CollectorRegistry, ref: _Reference) -> None:
    ours, theirs = _samples(generate_latest(registry).decode()), _samples(
        generate_latest(ref.registry).decode())
    assert theirs, "the reference saw nothing"
    for key, value in theirs.items():
        assert ours.get(key) == pytest.approx(value, rel=1e-9, abs=1e-9), key
    # and nothing more of these families (no stray label sets)
    families = {name for name, _ in theirs}
    assert {k for k in ours if k[0] in families} == set(theirs)


def test_many_steps_across_compactions_folds_and_a_hand_off_match_one_by_one() -> None:
    rng = random.Random(11)
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    ref = _Reference()
    research, writer = _agent("research", "big"), _agent("writer", "small")
    usage = Usage(0, 0)
    steps = 0
    for run in range(40):
        agent = research if run % 3 else writer
        record = RunRecord(f"run_{run}", agent.name, "go")
        on_step = metrics.run_started(agent, record)
        for step in range(rng.randint(1, 60)):
            if run == 7 and step == 3:  # a hand-off: the rest of the run is the writer's
                agent = writer
            results = [_result(rng, i) for i in range(rng.choice([0, 1, 1, 1, 2, 3]))]
            profile = _profile(rng, step, len(results))
            on_step(agent, record, profile, usage, list(enumerate(results)))
            ref.step(agent, profile, results)
            steps += 1
        if run == 20:
            metrics.fold()  # a fold midway changes nothing in the totals
    assert steps > 3 * COMPACT_AT  # several compactions of each tally
    metrics.fold()
    _assert_same(metrics, registry, ref)


@pytest.mark.anyio
async def test_an_engine_without_profiles_still_counts_its_steps_and_tools() -> None:
    # Engine(profile=False) hands the hook empty figures: steps and tool calls are counted,
    # no phase is timed (and the fold does not trip over the empty figures).
    from observe_agents import support

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    async with Engine(profile=False) as engine:
        engine.hook = metrics
        for _ in range(3):
            assert (await engine.run(support(), "where is A-1?")).status == "completed"
    metrics.fold()
    parsed = _samples(generate_latest(registry).decode())
    assert parsed[("podium_steps_total", frozenset({("agent", "support")}))] == 6
    key = ("podium_tool_calls_total", frozenset({("tool", "lookup"), ("outcome", "ok")}))
    assert parsed[key] == 3
    assert not any(name.startswith("podium_step_phase") and value
                   for (name, _), value in parsed.items())


@pytest.mark.anyio
async def test_steps_are_counted_under_the_name_the_run_was_served_as() -> None:
    """podium.toml may serve one agent object under several names: its steps were counted
    under the object's own name, its ends under the served ones, so the two disagreed
    (found from the outside)."""
    from observe_agents import support

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    agent = support()
    async with Engine() as engine:
        engine.hook = metrics
        for i, served in enumerate(("helpdesk", "sales", "helpdesk")):
            record = RunRecord(f"run_{i}", served, "where is A-1?")
            await engine.store.create(record)
            assert (await engine.execute(agent, record)).status == "completed"
    metrics.fold()
    parsed = _samples(generate_latest(registry).decode())
    assert parsed[("podium_steps_total", frozenset({("agent", "helpdesk")}))] == 4
    assert parsed[("podium_steps_total", frozenset({("agent", "sales")}))] == 2
    assert ("podium_steps_total", frozenset({("agent", "support")})) not in parsed


@pytest.mark.parametrize("alike", [True, False])
def test_run_ends_count_what_one_observation_per_run_does(alike: bool) -> None:
    # Runs that all ended alike are counted in bulk; mixed ones (agents, statuses, pools,
    # runs without a profile) one by one: the scrape is the same as observing each run.
    from podium.engine.profile import RunProfile

    rng = random.Random(alike)
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    r = CollectorRegistry()
    runs = Counter("podium_runs_finished", "", ["agent", "status", "reason"], registry=r)
    tokens = Counter("podium_model_tokens", "", ["agent", "kind"], registry=r)
    wait = Histogram("podium_queue_wait_seconds", "", ["pool"], buckets=PHASE_BUCKETS,
                     registry=r)
    for i in range(300):
        record = RunRecord(f"run_{i}", "support", "go", status="completed",
                           usage=Usage(rng.randint(1, 900), rng.randint(1, 90)),
                           profile=RunProfile(admit_ns=rng.choice([0, rng.randint(1, 10**9)])))
        if not alike:
            record.agent = rng.choice(["support", "writer"])
            record.status = rng.choice(["completed", "failed"])
            record.reason = None if record.status == "completed" else "max_steps"
            record.pool = rng.choice(["default", "batch"])
            record.profile = rng.choice([record.profile, None])
        metrics.run_finished(record)
        runs.labels(record.agent, record.status, record.reason or "").inc()
        tokens.labels(record.agent, "input").inc(record.usage.input_tokens)
        tokens.labels(record.agent, "output").inc(record.usage.output_tokens)
        if record.profile is not None:
            wait.labels(record.pool).observe(record.profile.admit_ns / 1e9)
    metrics.fold()
    ours, theirs = _samples(generate_latest(registry).decode()), _samples(
        generate_latest(r).decode())
    for key, value in theirs.items():
        assert ours.get(key) == pytest.approx(value, rel=1e-9, abs=1e-9), key


def test_unprofiled_steps_are_compacted_as_they_are_filed() -> None:
    # Without profiles nothing is added to the phase figures that a run start checks: the
    # steps' own count triggers the compaction (the tool latencies stay bounded).
    metrics = RunMetrics(CollectorRegistry())
    agent = _agent("support", "small")
    record = RunRecord("run_1", agent.name, "go")
    on_step = metrics.run_started(agent, record)
    result = ToolResult("c0", "lookup", "ok", wall_ns=1_000)
    for step in range(COMPACT_AT + 1):
        on_step(agent, record, StepProfile(step, (), (), 1, 0), Usage(0, 0), [(0, result)])
    (tally,) = metrics._tallies.values()
    assert tally.figures.steps == COMPACT_AT
    assert len(tally.tools["lookup"]) < 3  # the calls of the steps since
