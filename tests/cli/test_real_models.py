"""Real models without Python: ``[[models]]``, declared agents, ``--model`` and the OpenAI
environment variables, each driving a real ``podium sim-server`` subprocess on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podium.config import load_config
from podium.errors import ConfigError
from podium.factory import build_models, model_from_option, served_agents
from podium.models.pool import BackendPool
from serve_process import sim_server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openai-endpoint" / "podium.toml"
TOOL_STEPS = 2  # the sim-server calls the first tool this many times, then answers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    args = ("--step-ms", "1", "--output-tokens", "40", "--tool-steps", str(TOOL_STEPS))
    with sim_server(*args) as url:
        yield url


def podium_run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "run", *args],
        env={**clean, **env}, cwd=cwd, capture_output=True, text=True, timeout=60,
    )


def finished(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert out.returncode == 0, out.stderr
    assert "Unclosed" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    run: dict[str, object] = json.loads(out.stdout)
    assert run["status"] == "completed" and run["steps"] == TOOL_STEPS + 1, run
    return run


def test_example_declared_agent_runs_on_the_endpoint(sim_url: str, tmp_path: Path) -> None:
    # The shipped example, pointed at this test's server (base_url taken from the env).
    text = EXAMPLE.read_text().replace('base_url = "http://127.0.0.1:8001/v1"', "")
    config = tmp_path / "podium.toml"
    config.write_text(text)
    run = finished(
        podium_run("assistant", "Time in Paris?", "--json", env={"OPENAI_BASE_URL": sim_url},
                   cwd=tmp_path)
    )
    assert run["agent"] == "assistant"


def test_example_python_agent_reads_the_openai_environment(sim_url: str, tmp_path: Path) -> None:
    finished(
        podium_run("podium.examples.openai_endpoint:agent", "Time in Tokyo?", "--json",
                   env={"OPENAI_BASE_URL": sim_url, "PODIUM_MODEL": "podium-sim"}, cwd=tmp_path)
    )


def test_model_option_puts_a_builtin_agent_on_the_endpoint(sim_url: str, tmp_path: Path) -> None:
    run = finished(
        podium_run("react", "q", "--model", "podium-sim", "--json",
                   env={"OPENAI_BASE_URL": sim_url}, cwd=tmp_path)
    )
    # The simulated model's scripted answer would be "Podium: 42 items…": this one is the server's.
    assert "42 items" not in str(run["output"])


def test_model_option_names_a_configured_model(sim_url: str, tmp_path: Path) -> None:
    (tmp_path / "podium.toml").write_text(
        f'[[models]]\nname = "fast"\nbase_url = "{sim_url}"\nmodel = "podium-sim"\n'
    )
    finished(podium_run("react", "q", "--model", "fast", "--json", env={}, cwd=tmp_path))


def test_quiet_prints_only_the_answer_unwrapped(sim_url: str, tmp_path: Path) -> None:
    out = podium_run("react", "q", "--model", "podium-sim", "--quiet",
                     env={"OPENAI_BASE_URL": sim_url}, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.count("\n") == 1 and len(out.stdout) > 80  # one long line, not wrapped


def test_models_config_builds_pools_with_keys_and_routing(tmp_path: Path) -> None:
    config = tmp_path / "podium.toml"
    config.write_text(
        """
[[models]]
name = "mixed"
base_url = "http://gpu:8000/v1"
model = "qwen"
group = "gpu"
capacity = 128
api_key_env = "GPU_KEY"

[[models]]
name = "mixed"
base_url = "http://cpu:8080/v1"
model = "qwen-q4"
group = "cpu"
capacity = 4
tags = ["small"]
routing = [{ max_prompt_tokens = 2000 }]
health_path = "health"

[[agents]]
name = "support"
model = "mixed"
instructions = "Help."
tools = ["podium.examples.openai_endpoint:utc_offset_now"]
max_steps = 3
"""
    )
    cfg = load_config(config, environ={})
    models = build_models(cfg, {"GPU_KEY": "sk-gpu"})
    pool = models["mixed"]
    assert isinstance(pool, BackendPool)
    assert [(b.group, b.capacity) for b in pool.backends] == [("gpu", 128), ("cpu", 4)]
    assert pool.router.default_group == "gpu"
    assert [r.group for r in pool.router.rules] == ["cpu", "cpu"]
    gpu = pool.backends[0].model
    assert gpu._headers["Authorization"] == "Bearer sk-gpu"  # type: ignore[attr-defined]
    assert "Authorization" not in pool.backends[1].model._headers  # type: ignore[attr-defined]
    [served] = served_agents(cfg, models)
    assert served.name == "support" and served.agent.model is pool
    assert list(served.agent.tools) == ["utc_offset_now"] and served.agent.max_steps == 3


def test_model_option_reads_the_openai_variables() -> None:
    model = model_from_option(
        "gpt-x", None, {"OPENAI_BASE_URL": "http://h:1/v1", "OPENAI_API_KEY": "sk-1"}
    )
    assert model.base_url == "http://h:1/v1"  # type: ignore[attr-defined]
    assert model._headers["Authorization"] == "Bearer sk-1"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[[agents]]\nname = "a"\nmodel = "nope"\n', "no [[models]] entry"),
        ('[[agents]]\nname = "a"\n', "needs 'name' and 'model'"),
        ('[[models]]\nname = "m"\nmodel = "x"\ncapacity = 0\n', "capacity"),
    ],
)
def test_bad_model_configs_are_refused(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        load_config(path, environ={})


def test_declared_agent_with_a_plain_function_tool_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(
        '[[models]]\nname = "m"\nmodel = "x"\n\n[[agents]]\nname = "a"\nmodel = "m"\n'
        'tools = ["tests.cli.cli_agents:plain_lookup"]\n'
    )
    with pytest.raises(ConfigError, match="decorate it with @tool"):
        served_agents(load_config(path, environ={}))



def test_serve_model_option_serves_agents_on_the_endpoint(sim_url: str, tmp_path: Path) -> None:
    import socket

    import httpx

    from serve_process import start_serve

    (tmp_path / "podium.toml").write_text(
        '[server]\nstore = "memory"\ndrain_grace_s = 5\n\n[[keys]]\nkey = "pk_m"\ntenant = "t"\n'
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    serving = start_serve(
        ["--agent", "react", "--model", "podium-sim", "--port", str(port)],
        cwd=tmp_path, env={**clean, "OPENAI_BASE_URL": sim_url},
    )
    try:
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/runs",
            json={"agent": "react", "input": "q", "wait": True},
            headers={"Authorization": "Bearer pk_m"}, timeout=30,
        )
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        assert "42 items" not in r.json()["output"]
    finally:
        serving.stop(30)
    log = serving.log
    assert "Unclosed" not in log and "Traceback" not in log, log


def test_with_model_keeps_every_other_setting() -> None:
    # It used to rebuild the agent field by field and dropped the ones added later
    # (max_tool_calls, screening).
    from podium import Agent, ScreeningPolicy, SimulatedModel
    from podium.factory import with_model

    agent = Agent("a", SimulatedModel(), "Be brief.", max_tool_calls=3, deadline_s=7.0,
                  screening=ScreeningPolicy(action="block"), tags=("x",))
    other = SimulatedModel()
    moved = with_model(agent, other)
    assert moved.model is other and agent.model is not other
    assert (moved.max_tool_calls, moved.deadline_s, moved.tags) == (3, 7.0, ("x",))
    assert moved.screening is agent.screening and moved.prefix is agent.prefix
