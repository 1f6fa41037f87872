"""Tools the process pool's children must be able to import by module name."""

from __future__ import annotations

import os

from podium import tool


@tool(cpu_bound=True)
def whoami() -> int:
    """The process id of the process that ran this call."""
    return os.getpid()


@tool(cpu_bound=True)
def fib(n: int) -> int:
    """A pure CPU task: the n-th Fibonacci number, iteratively.

    Args:
        n: Which number.
    """
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
