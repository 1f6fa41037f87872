"""``podium plan`` as a user runs it: a real profile from ``podium bench --json``, the plan
as text, JSON and values, the what-ifs, and bad input answered in one line (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = """
[load]
runs = 60
concurrency = 10
[model]
ttft_ms = 5
per_token_ms = 0
[script]
tool_steps = 3
[[tools]]
name = "lookup"
latency_ms = 2
"""
FAST = ("--sim-runs", "2000")


def podium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podium.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("plan")
    scenario = where / "react.toml"
    scenario.write_text(SCENARIO)
    out = podium("bench", "--scenario", str(scenario), "--json")
    assert out.returncode == 0, out.stderr
    path = where / "react.json"
    path.write_text(out.stdout)
    return path


def refused(out: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("podium plan: error: ")
    return lines[0]


def test_the_plan_as_text_json_and_values(profile: Path) -> None:
    out = podium("plan", "--from", str(profile), "--rate", "300", "--p99", "2s", *FAST)
    assert out.returncode == 0, out.stderr
    for words in ("worker processes", "concurrency per worker", "gateway replicas", "Redis",
                  "model calls in flight", "bottleneck"):
        assert words in out.stdout
    data = json.loads(podium("plan", "--from", str(profile), "--rate", "300", "--p99", "2s",
                             "--json", *FAST).stdout)
    assert data["workers"] >= 1 and data["concurrency_per_worker"] >= 8
    assert data["kinds"][0]["predicted_p99_s"] <= 2.0
    assert data["bottleneck"] in {r["name"] for r in data["resources"]}
    assert data["profiles"][0]["kind"] == "bench"
    # The Helm values name the chart's own keys.
    values = yaml.safe_load(podium("plan", "--from", str(profile), "--rate", "300", "--p99",
                                   "2s", "--values", "helm", *FAST).stdout)
    chart = yaml.safe_load((ROOT / "deploy/helm/podium/values.yaml").read_text())
    assert set(values) <= set(chart)
    assert set(values["worker"]) <= set(chart["worker"])
    assert set(values["pools"][0]) <= set(chart["pools"][0])
    assert values["pools"][0]["replicas"] == data["workers"]
    assert values["worker"]["concurrency"] == data["concurrency_per_worker"]
    compose = podium("plan", "--from", str(profile), "--rate", "300", "--p99", "2s",
                     "--values", "compose", *FAST).stdout
    assert f"WORKERS={data['workers']}" in compose


def test_more_load_or_slower_model_calls_plan_more(profile: Path) -> None:
    def plan(*extra: str) -> dict[str, float]:
        out = podium("plan", "--from", str(profile), "--p99", "5s", "--json", *FAST, *extra)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    base = plan("--rate", "200")
    assert plan("--rate", "20000")["workers"] > base["workers"]
    slow = plan("--rate", "200", "--model-latency", "x4")
    assert slow["model_calls_in_flight"] == pytest.approx(4 * base["model_calls_in_flight"],
                                                          rel=0.1)
    assert slow["whatifs"] == ["model latency ×4"]
    longer = plan("--rate", "200", "--steps", "12")
    assert longer["kinds"][0]["steps"] == 12
    heavy = plan("--rate", "200", "--cpu-per-step", "2ms")
    assert heavy["kinds"][0]["cpu_ms_per_run"] > base["kinds"][0]["cpu_ms_per_run"]
    assert heavy["workers"] > base["workers"]
    tail = plan("--rate", "200", "--tool-p99", "1s")
    assert tail["kinds"][0]["predicted_p99_s"] > base["kinds"][0]["predicted_p99_s"]


def test_a_mix_of_agents(profile: Path, tmp_path: Path) -> None:
    pairs = podium("plan", "--from", str(profile), "--rate", "100", "--from", str(profile),
                   "--rate", "50", "--p99", "5s", "--json", *FAST)
    assert pairs.returncode == 0, pairs.stderr
    assert [k["rate"] for k in json.loads(pairs.stdout)["kinds"]] == [100, 50]
    mix = tmp_path / "mix.toml"
    mix.write_text(f'[[agents]]\nfrom = "{profile}"\nrate = 100\nname = "support"\n'
                   f'[[agents]]\nfrom = "{profile}"\nrate = 50\nname = "research"\n')
    out = podium("plan", "--mix", str(mix), "--p99", "5s", "--json", *FAST)
    assert out.returncode == 0, out.stderr
    assert [k["name"] for k in json.loads(out.stdout)["kinds"]] == ["support", "research"]


def test_bad_profiles_are_one_line(profile: Path, tmp_path: Path) -> None:
    data = json.loads(profile.read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**data, "profile_format": 99}))
    assert "profile format 99" in refused(podium("plan", "--from", str(other), "--rate", "1",
                                                 "--p99", "2s"))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in data.items() if k != "profile_format"}))
    assert "no profile_format" in refused(podium("plan", "--from", str(old), "--rate", "1",
                                                 "--p99", "2s"))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert "empty" in refused(podium("plan", "--from", str(empty), "--rate", "1", "--p99",
                                     "2s"))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({k: v for k, v in data.items() if k != "phases"}))
    assert "partial" in refused(podium("plan", "--from", str(partial), "--rate", "1",
                                       "--p99", "2s"))
    none = tmp_path / "none.json"
    none.write_text(json.dumps({**data, "runs": 0, "steps": 0}))
    assert "empty profile" in refused(podium("plan", "--from", str(none), "--rate", "1",
                                             "--p99", "2s"))
    assert "not JSON" in refused(podium("plan", "--from", str(ROOT / "README.md"), "--rate",
                                        "1", "--p99", "2s"))
    assert "one --rate per --from" in refused(podium("plan", "--from", str(profile),
                                                     "--p99", "2s"))


def test_an_impossible_target_says_why(profile: Path) -> None:
    line = refused(podium("plan", "--from", str(profile), "--rate", "10", "--p99", "10ms",
                          *FAST))
    assert "cannot be met" in line and "no queueing" in line and "model calls" in line


def test_check_measures_the_plan_here(profile: Path) -> None:
    out = podium("plan", "--from", str(profile), "--rate", "20", "--p99", "2s", "--check",
                 "--check-seconds", "3", *FAST, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "check:" in out.stdout and "predicted" in out.stdout and "measured" in out.stdout
    assert "run p99" in out.stdout and "p99's 95 % interval" in out.stdout
    refusal = refused(podium("plan", "--from", str(profile), "--rate", "20", "--p99", "2s",
                             "--check", "--steps", "3", *FAST))
    assert "what-ifs" in refusal


def test_a_stores_profile_and_a_sweep_plan_too(tmp_path: Path) -> None:
    scenario = tmp_path / "react.toml"
    scenario.write_text(SCENARIO)
    store = tmp_path / "runs.sqlite"
    assert podium("bench", "--scenario", str(scenario), "--store", str(store)).returncode == 0
    runs = podium("runs", "profile", "--store", str(store), "--json")
    assert runs.returncode == 0, runs.stderr
    (tmp_path / "runs.json").write_text(runs.stdout)
    sweep = podium("bench", "--scenario", str(scenario), "--sweep", "5,10", "--json")
    assert sweep.returncode == 0, sweep.stderr
    (tmp_path / "sweep.json").write_text(sweep.stdout)
    # Each level says its CPU and wake-ups per step: across levels, a wake-up's price.
    levels = json.loads(sweep.stdout)["sweep"]
    assert all(p["cpu_us_per_step"] > 0 and p["loop_wakeups_per_step"] >= 0 for p in levels)
    text = podium("plan", "--from", str(tmp_path / "sweep.json"), "--rate", "50", "--p99",
                  "2s", *FAST)
    assert text.returncode == 0, text.stderr
    assert "wake-ups from idle at" in text.stdout
    for name, kind in (("runs.json", "runs"), ("sweep.json", "sweep")):
        out = podium("plan", "--from", str(tmp_path / name), "--rate", "50", "--p99", "2s",
                     "--json", *FAST)
        assert out.returncode == 0, out.stderr
        plan = json.loads(out.stdout)
        assert plan["profiles"][0]["kind"] == kind and plan["workers"] >= 1
    # A store's profile names no scenario: --check cannot run its agent, and says so.
    line = refused(podium("plan", "--from", str(tmp_path / "runs.json"), "--rate", "5",
                          "--p99", "2s", "--check", *FAST))
    assert "names no scenario" in line


def test_a_busy_profile_is_read_with_a_note(profile: Path, tmp_path: Path) -> None:
    from podium.plan import load_profile

    # Without the loop's lag distribution (an older bench's profile) the queueing is
    # estimated (M/G/1 at the profile's utilization).
    data = {**json.loads(profile.read_text()), "loop_lag_quantiles_ms": []}
    light_path = tmp_path / "light.json"
    light_path.write_text(json.dumps(data))
    light, _ = load_profile(str(light_path))
    busy_path = tmp_path / "busy.json"
    busy_path.write_text(json.dumps({**data, "cpu_utilization": 0.93}))
    busy, facts = load_profile(str(busy_path))
    assert facts.warning is not None and "93% CPU" in facts.warning
    # The loop's queueing at 93 % is taken off the measured waits: they come out shorter.
    assert busy.model_wait.mean < light.model_wait.mean
    out = podium("plan", "--from", str(busy_path), "--rate", "10", "--p99", "2s", *FAST)
    assert out.returncode == 0 and "note: it was taken at 93% CPU" in out.stdout


def test_blocked_time_holds_the_loop_and_leaves_the_tools_wait(profile: Path,
                                                              tmp_path: Path) -> None:
    # A synchronous tool that sleeps on the loop: the profile books its sleep as blocked
    # (no CPU). The plan counts it as the loop's time and takes it off the tools' wait.
    from podium.plan import load_profile

    data = json.loads(profile.read_text())
    plain, _ = load_profile(str(profile))
    tools = data["phases"]["tools"]
    blocked_ms = 1.0 * tools["samples"]  # 1 ms per tool call
    data["phases"]["tools"] = {**tools, "blocked_ms_total": blocked_ms}
    path = tmp_path / "blocked.json"
    path.write_text(json.dumps(data))
    blocked, _ = load_profile(str(path))
    per_step = blocked_ms / 1e3 / data["steps"]
    assert blocked.cpu_after_model == pytest.approx(plain.cpu_after_model + per_step)
    assert blocked.cpu_per_step == pytest.approx(plain.cpu_per_step + per_step)
    assert blocked.tool_wait.mean == pytest.approx(plain.tool_wait.mean - 1e-3, abs=2e-4)


def test_wake_ups_and_host_stalls_are_taken_off_the_profile(profile: Path,
                                                           tmp_path: Path) -> None:
    # A bench profile says how often the loop woke from idle and what a wake-up costs:
    # CPU a saturated loop does not spend. And how long the host kept the loop off its
    # core: time the measured waits include that is no model's or tool's.
    from podium.plan import load_profile

    data = json.loads(profile.read_text())
    for key in ("loop_wakeups_per_step", "loop_wake_cpu_us", "loop_runqueue_share",
                "loop_runqueue_episode_ms"):
        assert isinstance(data[key], int | float) and data[key] >= 0, key
    base = {**data, "loop_wakeups_per_step": 0.0, "loop_runqueue_share": 0.0,
            "cpu_utilization": 0.3, "cpu_us_per_step": 4 * data["profiled_cpu_us_per_step"],
            "loop_lag_quantiles_ms": []}
    plain_path, woken_path, starved_path = (tmp_path / f"{n}.json" for n in "pws")
    plain_path.write_text(json.dumps(base))
    woken_path.write_text(json.dumps({**base, "loop_wakeups_per_step": 0.5,
                                      "loop_wake_cpu_us": 40.0}))
    starved_path.write_text(json.dumps({**base, "loop_runqueue_share": 0.5,
                                        "loop_runqueue_episode_ms": 4.0}))
    plain, _ = load_profile(str(plain_path))
    woken, _ = load_profile(str(woken_path))
    starved, _ = load_profile(str(starved_path))
    assert woken.cpu_per_step == pytest.approx(plain.cpu_per_step - 20e-6)
    # Stalls of 4 ms half the time: 2 ms a call on average, out of the model's waits.
    assert plain.model_wait.mean - 2.5e-3 < starved.model_wait.mean < \
        plain.model_wait.mean - 0.5e-3
    assert starved.tool_wait.mean < plain.tool_wait.mean


def test_a_sweeps_levels_price_the_wake_ups_taken_off(profile: Path, tmp_path: Path) -> None:
    # A wake-up of a loop sleeping with nothing to do costs 60 µs; across the sweep's
    # levels the loaded loop paid 180 µs a wake-up: that is what comes off its CPU.
    from podium.plan import load_profile

    data = json.loads(profile.read_text())
    cpu = 4 * data["profiled_cpu_us_per_step"]
    base = {**data, "loop_wakeups_per_step": 0.15, "loop_wake_cpu_us": 60.0,
            "cpu_utilization": 0.3, "cpu_us_per_step": cpu, "loop_lag_quantiles_ms": []}
    level = {"concurrency": 10, "runs": 60, "runs_per_s": 1.0, "steps_per_s": 1.0,
             "run_p50_ms": 1.0, "run_p99_ms": 1.0, "cpu_utilization": 0.3}
    swept = {**base, "sweep": [{**level, "cpu_us_per_step": cpu + 180 * 0.18,
                                "loop_wakeups_per_step": 0.33},
                               {**level, "cpu_us_per_step": cpu,
                                "loop_wakeups_per_step": 0.15}]}
    flat = {**swept, "sweep": [{**p, "loop_wakeups_per_step": 0.15} for p in swept["sweep"]]}
    for name, profile_data in (("one", base), ("swept", swept), ("flat", flat)):
        (tmp_path / f"{name}.json").write_text(json.dumps(profile_data))
    one, one_facts = load_profile(str(tmp_path / "one.json"))
    levels, level_facts = load_profile(str(tmp_path / "swept.json"))
    _, flat_facts = load_profile(str(tmp_path / "flat.json"))
    assert (one_facts.wake_cpu_from, one_facts.wake_cpu_us) == ("idle loop", 60.0)
    assert level_facts.wake_cpu_from == "levels"
    assert level_facts.wake_cpu_us == pytest.approx(180.0)
    assert levels.cpu_per_step == pytest.approx(one.cpu_per_step - 0.15 * 120e-6)
    # Levels whose wake-ups do not differ cannot price one: the idle loop's figure.
    assert (flat_facts.wake_cpu_from, flat_facts.wake_cpu_us) == ("idle loop", 60.0)


def test_the_loops_lag_comes_out_of_the_waits(profile: Path, tmp_path: Path) -> None:
    # A timer on the loop that was 4 ms late at the median, as a wait ending at a random
    # moment was: the model's and the tools' own times are the measured less that.
    from podium.engine.profile import QUANTILE_POINTS
    from podium.plan import load_profile

    data = json.loads(profile.read_text())
    assert len(data["loop_lag_quantiles_ms"]) == len(QUANTILE_POINTS)
    quiet = {**data, "loop_lag_quantiles_ms": [0.0] * len(QUANTILE_POINTS)}
    late = {**data, "loop_lag_quantiles_ms": [4.0] * len(QUANTILE_POINTS)}
    (tmp_path / "quiet.json").write_text(json.dumps(quiet))
    (tmp_path / "late.json").write_text(json.dumps(late))
    plain, _ = load_profile(str(tmp_path / "quiet.json"))
    lagged, _ = load_profile(str(tmp_path / "late.json"))
    assert lagged.model_wait.quantile(0.5) == pytest.approx(
        max(0.0, plain.model_wait.quantile(0.5) - 4e-3), abs=3e-4)
    assert lagged.tool_wait.mean < plain.tool_wait.mean
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "loop_lag_quantiles_ms": [1.0, -1.0]}))
    line = refused(podium("plan", "--from", str(bad), "--rate", "10", "--p99", "2s", *FAST))
    assert "loop_lag_quantiles_ms" in line
