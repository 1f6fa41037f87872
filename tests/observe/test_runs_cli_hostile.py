"""``podium runs`` on hostile runs: escape sequences in a run print as text, never reach the
terminal raw; rich markup in it prints as typed; a 10,000-step run prints a bounded page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hostile_agents import HOSTILE, hostile, long_run

from podium.engine.driver import Engine
from podium.store.sqlite import SQLiteRunStore

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

#: What a terminal would act on: erase, retitle (OSC), hyperlink (OSC 8), C1 CSI, bidi.
RAW = ("\x1b[2J", "\x1b]0;", "\x1b]8;", "\x9b", "\x07", "\r", "\u202e")


def podium(*args: str) -> str:
    # FORCE_COLOR: rich writes for a colour terminal, as it would for a person.
    out = subprocess.run([sys.executable, "-m", "podium.cli.main", "runs", *args],
                         capture_output=True, text=True, timeout=120,
                         env=subprocess_env(FORCE_COLOR="1", COLUMNS="200"))
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_runs_views_print_hostile_text_literally(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store, Engine(store) as engine:
        agent = hostile()
        record = await engine.create(agent, f"input {HOSTILE}", tenant=f"t{HOSTILE}")
        record = await engine.execute(agent, record)
    store_arg = f"sqlite:{path}"
    outputs = {
        "list": podium("list", "--store", store_arg),
        "show": podium("show", record.run_id, "--store", store_arg),
        "tail": podium("tail", record.run_id, "--store", store_arg, "--timeout", "30"),
        "profile": podium("profile", "--store", store_arg),
    }
    for verb, text in outputs.items():
        assert not [raw for raw in RAW if raw in text], (verb, text)
    for verb in ("show", "tail"):
        text = outputs[verb]
        assert "\\x1b[2J" in text and "\\x9b31m" in text and "\\u202eevil" in text, verb
        assert "[bold red]not bold[/]" in text and "[link=http://evil.test]x[/link]" in text
        assert "<script>window.pwned=1;alert(1)</script>" in text and "🦄" in text
    assert "\\x1b[2J" in outputs["list"]  # the tenant's name


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_show_of_a_ten_thousand_step_run_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store, Engine(store) as engine:
        record = await engine.execute(long_run(), await engine.create(long_run(), ""))
    assert record.steps == 10_000
    text = podium("show", record.run_id, "--store", f"sqlite:{path}")
    # was 4.9 MB (in 20 s): bounded is the size, not a busy machine's seconds
    assert len(text) < 400_000, len(text)
    assert "journal entries not shown (--json prints them all)" in text
    assert "9,800 steps not shown" in text and "9999" in text  # the last step is there


def test_podium_run_prints_a_hostile_run_as_text() -> None:
    """The live view of ``podium run`` (steps, calls, results as they happen)."""
    out = subprocess.run([sys.executable, "-m", "podium.cli.main", "run",
                          "hostile_agents:hostile", f"input {HOSTILE}"],
                         capture_output=True, text=True, timeout=120,
                         env=subprocess_env(FORCE_COLOR="1", COLUMNS="200"))
    assert out.returncode == 0, out.stdout + out.stderr
    steps = out.stdout.split("answer")[0]  # the answer is the model's text, as written
    assert not [raw for raw in RAW if raw in steps], steps
    assert "\\x1b[2J" in steps and "[bold red]not bold[/]" in steps
    assert "<script>window.pwned=1" in steps  # the name of the tool the model invented
