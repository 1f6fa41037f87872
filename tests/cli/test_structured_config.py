"""Structured output from ``podium.toml``: a declared agent names its ``output_type`` by import
path, ``[[models]] structured_output`` picks how the server is asked, and ``podium run --json``
prints the answer as a JSON object (against a real ``podium sim-server`` on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from podium.config import load_config
from podium.errors import ConfigError
from podium.factory import served_agents
from serve_process import sim_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

CONFIG = """
[[models]]
name = "sim"
base_url = "{url}"
model = "podium-sim"
structured_output = "{mode}"

[[agents]]
name = "triage"
model = "sim"
instructions = "File a ticket."
output_type = "tests.cli.cli_agents:Ticket"
output_retries = 1
"""


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_server("--step-ms", "1", "--output-tokens", "8") as url:
        yield url


@pytest.mark.parametrize("mode", ["native", "tool"])
def test_a_declared_agent_answers_its_output_type(sim_url: str, tmp_path: Path, mode: str) -> None:
    (tmp_path / "podium.toml").write_text(CONFIG.format(url=sim_url, mode=mode))
    (spec,) = served_agents(load_config(tmp_path / "podium.toml", environ={}))
    assert spec.agent.output is not None and spec.agent.output.mode == mode
    assert spec.agent.output_retries == 1
    out = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "run", "triage", "Printer on fire", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["status"] == "completed"
    assert run["output"] == {"title": "podium", "priority": 1, "urgent": True}


@pytest.mark.parametrize(
    ("agent", "needle"),
    [
        ('path = "gateway_agents:react"\noutput_type = "tests.cli.cli_agents:Ticket"',
         "set its output_type in Python"),
        ('name = "a"\nmodel = "m"\noutput_type = "tests.cli.cli_agents:plain_lookup"',
         "not a type"),
        ('name = "a"\nmodel = "m"\noutput_type = "asyncio:Event"', "cannot be validated"),
        ('name = "a"\nmodel = "m"\noutput_type = "tests.cli.cli_agents:Nope"',
         "has no attribute 'Nope'"),
        ('name = "a"\nmodel = "m"\noutput_type = "x:Y"\noutput_mode = "json"', "output_mode"),
    ],
)
def test_bad_output_types_are_config_errors(tmp_path: Path, agent: str, needle: str) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(f'[[models]]\nname = "m"\nmodel = "x"\n\n[[agents]]\n{agent}\n')
    with pytest.raises(ConfigError, match=needle):
        served_agents(load_config(path, environ={}))


def test_run_takes_a_built_in_name_from_the_config_as_serve_does(tmp_path: Path) -> None:
    """``[[agents]] path = "react"`` with a model of the file: ``podium run react`` runs
    that agent (on the file's model), as ``podium serve`` serves it; it used to run the
    built-in on its simulated model and never read the file."""
    with sim_server("--step-ms", "1", "--model", "local-sim") as url:
        (tmp_path / "podium.toml").write_text(
            f'[[models]]\nname = "local"\nbase_url = "{url}"\nmodel = "local-sim"\n\n'
            '[[agents]]\npath = "react"\nmodel = "local"\n'
        )
        out = subprocess.run(
            [sys.executable, "-m", "podium.cli.main", "run", "react", "hi", "--json"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        metrics = httpx.get(url.removesuffix("/v1") + "/metrics").text
    served = [line for line in metrics.splitlines() if line.startswith("sim_requests_total")]
    assert served and float(served[0].split()[-1]) >= 1, metrics[:500]


def test_run_reports_a_broken_config_whatever_the_agent(tmp_path: Path) -> None:
    (tmp_path / "podium.toml").write_text("[server\n")
    out = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "run", "react", "hi"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2 and "podium.toml" in out.stderr, out.stderr
