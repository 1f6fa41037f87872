"""Tools that run code: the built-in ``run_python`` tool, in a :class:`Sandbox`.

A tool declared with ``@tool(sandbox=Sandbox(...))`` runs its own function in the sandbox
instead (see :meth:`Sandbox.call`): same limits, no network, read-only import path.
"""

from __future__ import annotations

from typing import Any

from podium.security.sandbox import Sandbox, SandboxError
from podium.tools.tool import Tool, tool

__all__ = ("run_python", "run_python_tool")


def run_python_tool(sandbox: Sandbox | None = None, *, name: str = "run_python") -> Tool[..., Any]:
    """A tool that runs a Python program in ``sandbox`` and returns what it printed.

    Where no sandbox is available the call fails with an error observation saying so;
    the code is never run unconfined.
    """
    box = sandbox or Sandbox()

    async def run_python(code: str) -> str:
        """Run a Python program in an isolated sandbox and return its output.

        The sandbox has no network, a read-only filesystem and a private writable
        /scratch directory; CPU time, memory, processes and output are limited.

        Args:
            code: A complete Python program; print what you want to see.
        """
        result = await box.run_python(code)
        if result.killed is not None:
            raise SandboxError(
                f"stopped by the sandbox's {result.killed} limit"
                + (f"; output so far: {result.stdout[-2000:]}" if result.stdout else "")
            )
        parts = [result.stdout]
        if result.truncated:
            parts.append(f"[output cut at {box.limits.output_bytes} bytes]")
        if result.stderr:
            parts.append(f"[stderr]\n{result.stderr[-4000:]}")
        if result.exit_code != 0:
            parts.append(f"[exit code {result.exit_code}]")
        return "\n".join(p for p in parts if p) or "(no output)"

    run_python.__name__ = run_python.__qualname__ = name
    return tool(name=name, timeout=box.limits.wall_s + 5.0)(run_python)


#: The built-in ``run_python`` tool, with the default limits (:class:`SandboxLimits`).
run_python = run_python_tool()
