"""`podium run`'s step printer renders outside the run's phases. Called as an observer, its
rendering (a rich console: 1–5 ms a step on a terminal) counted in each step's checkpoint
and was stored in the run's profile: 8.8 ms "checkpoint, 100 % CPU" where the write took
0.5. A console that writes slowly makes the difference plain, whatever the machine."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from podium import Agent, Engine, tool
from podium.cli.run import _Printer
from podium.models.simulated import LatencyModel, Scenario, SimulatedModel

pytestmark = pytest.mark.anyio

SLOW_WRITE_S = 0.2


class SlowTerminal(io.StringIO):
    def write(self, text: str) -> int:
        time.sleep(SLOW_WRITE_S)
        return super().write(text)


@tool
def lookup(query: str) -> str:
    """Look it up.

    Args:
        query: What.
    """
    return "42 items"


async def test_rendering_is_not_counted_in_the_runs_checkpoints() -> None:
    terminal = SlowTerminal()
    printer = _Printer(Console(file=terminal, width=80))
    model = SimulatedModel(  # a model call waits: the renders run then
        Scenario.react("lookup", {"query": "q"}, tool_steps=2, final="done"),
        latency=LatencyModel(ttft_s=0.01),
    )
    agent = Agent("looker", model, "You look.", [lookup])
    async with Engine(observers=[printer]) as engine:
        record = await engine.run(agent, "go")
        await printer.flush()
    assert record.status == "completed" and record.profile is not None
    checkpoints = [step.wall_ns[5] / 1e9 for step in record.profile.steps]
    assert len(checkpoints) == 3 and max(checkpoints) < SLOW_WRITE_S / 2, checkpoints
    shown = terminal.getvalue()
    assert shown.count("→ lookup") == 2 and shown.count("← lookup") == 2  # all of it, in order
    assert shown.index("step 0") < shown.index("step 1") < shown.index("step 2")
