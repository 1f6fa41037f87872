"""`podium bench`: scenario files, overrides, and the --json report's keys (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podium.cli.scenario import BenchScenario, build_agent, load_scenario
from podium.errors import ConfigError

REQUIRED = {
    "runs",
    "steps",
    "wall_s",
    "steps_per_s",
    "runs_per_s",
    "cpu_us_per_step",
    "loop_lag_p99_ms",
    "rss_per_run_kb",
    "phases",
}
PHASE_KEYS = {"wall_p50_ms", "wall_p95_ms", "wall_p99_ms", "cpu_ms_total", "wait_ms_total"}
ROOT = Path(__file__).resolve().parents[2]


def podium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


FAST = """
[load]
runs = 40
concurrency = 10
[model]
ttft_ms = 1
per_token_ms = 0
jitter = "none"
[script]
tool = "lookup"
tool_steps = 3
[[tools]]
name = "lookup"
latency_ms = 1
"""


@pytest.mark.slow
def test_bench_json_report_has_the_documented_keys(tmp_path: Path) -> None:
    scenario = tmp_path / "fast.toml"
    scenario.write_text(FAST)
    done = podium("bench", "--scenario", str(scenario), "--runs", "30", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report.keys() >= REQUIRED
    assert report["runs"] == 30 and report["completed"] == 30
    assert report["concurrency"] == 10  # from the file
    assert report["steps"] == 30 * 4  # three tool steps and the answer
    assert set(report["phases"]) == {
        "admit", "assemble", "model", "parse", "tools", "merge", "checkpoint"
    }
    for row in report["phases"].values():
        assert row.keys() >= PHASE_KEYS
    assert report["phases"]["model"]["wait_ms_total"] > 0  # the 1 ms model latency is waiting
    assert report["cpu_us_per_step"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["burn", "make", "time", "crunch"])
def test_a_cpu_tool_works_whatever_its_name_and_the_report_counts_failures(
    tmp_path: Path, name: str
) -> None:
    """A `kind = "cpu"` tool named like the module that makes it (`burn`) replaced that
    module's own function: every call failed, and the bench said completed 40/40 (found
    from the outside). The report counts the tool calls and those that failed."""
    scenario = tmp_path / "cpu.toml"
    cpu = FAST.replace('tool = "lookup"', f'tool = "{name}"').replace(
        'name = "lookup"\nlatency_ms = 1', f'name = "{name}"\nkind = "cpu"\nlatency_ms = 1'
    )
    scenario.write_text(cpu)
    done = podium("bench", "--scenario", str(scenario), "--runs", "4", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["tool_calls"], report["tool_failures"]) == (12, 0), report


@pytest.mark.slow
def test_bench_table_and_bad_scenario(tmp_path: Path) -> None:
    scenario = tmp_path / "fast.toml"
    scenario.write_text(FAST)
    done = podium("bench", "--scenario", str(scenario), "--loop", "asyncio")
    assert done.returncode == 0, done.stderr
    for word in ("workload profile", "checkpoint", "steps/s", "event-loop lag p99", "RSS per run"):
        assert word in done.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nttft_msec = 3\n")
    done = podium("bench", "--scenario", str(bad))
    assert done.returncode == 2
    assert "ttft_msec" in done.stdout + done.stderr


def test_scenario_files_in_the_repo_load_and_build() -> None:
    for path in sorted((ROOT / "examples" / "scenarios").iterdir()):
        scenario = load_scenario(path)
        agent = build_agent(scenario)
        assert agent.tools, path


def test_yaml_and_toml_agree(tmp_path: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('[load]\nruns = 7\n[script]\ntool_steps = 2\n[[tools]]\nname = "lookup"\n')
    yaml = tmp_path / "a.yaml"
    yaml.write_text("load: {runs: 7}\nscript: {tool_steps: 2}\ntools: [{name: lookup}]\n")
    assert load_scenario(toml) == load_scenario(yaml)
    assert load_scenario(None) == BenchScenario()


def test_unknown_keys_and_missing_files_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("load: {runz: 3}\n")
    with pytest.raises(ConfigError, match="runz"):
        load_scenario(bad)
    with pytest.raises(ConfigError, match="No such file"):
        load_scenario(tmp_path / "missing.toml")
