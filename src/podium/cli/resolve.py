"""Find an agent from the command line: an import path or a built-in example name.

Kept for imports that predate :mod:`podium.factory`, where this now lives.
"""

from __future__ import annotations

from podium.factory import BUILTIN_AGENTS, resolve_agent

__all__ = ("BUILTIN_AGENTS", "resolve_agent")
