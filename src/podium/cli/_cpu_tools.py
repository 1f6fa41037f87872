"""CPU-burning scenario tools, defined at module level so a process pool can import them."""

from __future__ import annotations

import time
from collections.abc import Callable

BURN_MS: dict[str, float] = {}


def burn(name: str, query: str, ms: float) -> str:
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        x += 1
    return f"{query}: burned {ms} ms of CPU ({x} iterations)"


def make(name: str) -> Callable[[str], str]:
    ms = BURN_MS[name]

    def cpu_tool(query: str) -> str:
        return burn(name, query, ms)

    # The process pool finds the tool by module and qualified name: under a name of its
    # own, so a tool named like this module's own (burn, make, time) does not replace it.
    attr = f"scenario_tool_{name}"
    cpu_tool.__qualname__ = attr
    cpu_tool.__name__ = name
    globals()[attr] = cpu_tool
    return cpu_tool
