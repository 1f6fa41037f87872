"""Module-level tools for the sandbox tests (a sandboxed tool is imported by reference)."""

from __future__ import annotations

import os

from podium import tool
from podium.security.sandbox import Sandbox, SandboxLimits

BOX = Sandbox(SandboxLimits(cpu_s=5, wall_s=20, memory_bytes=1 << 30))


@tool(sandbox=BOX)
def word_count(text: str) -> dict[str, int]:
    """Count words, in the sandbox.

    Args:
        text: The text.
    """
    return {"words": len(text.split()), "uid": os.getuid()}


@tool(sandbox=BOX)
def read_file(path: str) -> str:
    """Read a file, in the sandbox.

    Args:
        path: The path.
    """
    with open(path) as f:
        return f.read()


@tool(sandbox=True)
def shout(text: str) -> str:
    """Upper-case a text, in a sandbox with the default limits.

    Args:
        text: The text.
    """
    return text.upper()


def big_result(n: int, printed: int = 0) -> str:
    """A result of ``n`` characters, after printing ``printed`` (called by Sandbox.call)."""
    print("y" * printed)
    return "x" * n


QUICK_WALL = Sandbox(SandboxLimits(cpu_s=5, wall_s=1.0))


@tool(sandbox=QUICK_WALL, timeout=60)
def nap_past_the_wall(seconds: float) -> str:
    """Sleep in a sandbox whose wall limit is 1 s (the tool's own timeout is 60 s).

    Args:
        seconds: How long.
    """
    import time

    time.sleep(seconds)
    return "woke"


@tool(sandbox=BOX, timeout=1.0)
def nap_past_the_tool(seconds: float) -> str:
    """Sleep in a sandbox with a 20 s wall limit; the tool's own timeout is 1 s.

    Args:
        seconds: How long.
    """
    import time

    time.sleep(seconds)
    return "woke"
