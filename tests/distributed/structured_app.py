"""A structured-output agent for the distributed tests, importable by worker subprocesses.

``verdict``'s model logs each call (``model <run> <step> <pid>``) to the file named by
``PODIUM_TEST_EFFECTS``: step 0 answers prose (rejected, journaled with its feedback),
step 1 calls ``crash_once``, which SIGKILLs its worker the first time a marker file is
absent (``tool <key> <pid>``), step 2 answers the verdict.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

import msgspec

from podium import (
    Agent,
    FunctionModel,
    Message,
    ModelRequest,
    ModelResponse,
    ToolContext,
    tool,
    tool_call_reply,
)

from .app import _log


class Verdict(msgspec.Struct):
    order_id: str
    refund: bool


@tool(side_effects=True)
def crash_once(ctx: ToolContext) -> str:
    """Kill the worker the first time (a machine dying mid-step)."""
    _log(f"tool {ctx.idempotency_key} {os.getpid()}")
    marker = Path(os.environ["PODIUM_TEST_EFFECTS"] + ".crashed")
    if not marker.exists():
        marker.write_text("1")
        os.kill(os.getpid(), signal.SIGKILL)
    return "checked"


def _reply(messages: Sequence[Message], request: ModelRequest) -> str | ModelResponse:
    _log(f"model {request.run_id} {request.step} {os.getpid()}")
    if request.step == 0:
        return "The order qualifies for a refund."
    if request.step == 1:
        return tool_call_reply(("crash_once", "{}"))
    return '{"order_id": "A-1", "refund": true}'


verdict = Agent(
    "verdict", FunctionModel(_reply), "Decide refunds.", [crash_once], output_type=Verdict,
    max_steps=6,
)
