"""The Helm values ``podium plan --values helm`` prints render the chart (its schema and
templates, by Helm's own engine) into the fleet the plan asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy.chart import container, merged, render

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_plans_values_render_the_planned_fleet(tmp_path: Path) -> None:
    scenario = tmp_path / "react.toml"
    scenario.write_text('[load]\nruns = 40\nconcurrency = 10\n[model]\nttft_ms = 5\n'
                        'per_token_ms = 0\n')
    bench = subprocess.run([sys.executable, "-m", "podium.cli.main", "bench", "--scenario",
                            str(scenario), "--json"], capture_output=True, text=True,
                           timeout=120, check=True)
    profile = tmp_path / "react.json"
    profile.write_text(bench.stdout)
    out = subprocess.run([sys.executable, "-m", "podium.cli.main", "plan", "--from",
                          str(profile), "--rate", "5000", "--p99", "2s", "--values", "helm",
                          "--sim-runs", "2000"], capture_output=True, text=True, timeout=120,
                         check=True)
    values = yaml.safe_load(out.stdout)
    # Where Redis is: the one thing the chart asks of every install, the plan's values aside.
    rendered = render(merged({"redis": {"cidrs": ["10.0.12.0/24"]}}, values))
    workers = [d for d in rendered.of("Deployment") if "worker" in container(d)["args"]]
    [pool] = workers
    planned = values["pools"][0]["replicas"]
    assert planned > 1
    # KEDA owns the worker Deployment's replicas (the chart leaves them out): the plan's
    # count is the ScaledObject's floor.
    assert pool["spec"].get("replicas", planned) == planned
    args = container(pool)["args"]
    assert args[args.index("--concurrency") + 1] == str(values["worker"]["concurrency"])
    [gateway] = [d for d in rendered.of("Deployment") if "serve" in container(d)["args"]]
    gateways = values["gateway"]["replicas"]
    assert gateways >= 2 and gateway["spec"].get("replicas", gateways) == gateways
    [hpa] = rendered.of("HorizontalPodAutoscaler")  # the gateways' (KEDA scales workers)
    assert hpa["spec"]["minReplicas"] == gateways <= hpa["spec"]["maxReplicas"]
    [scaled] = rendered.of("ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == planned
    assert scaled["spec"]["maxReplicaCount"] == 2 * planned
