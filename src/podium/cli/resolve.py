"""Find an agent from the command line: an import path or a built-in example name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from podium.agent import Agent
from podium.errors import ConfigError

__all__ = ("BUILTIN_AGENTS", "resolve_agent")

#: Built-in example agents, by the name the CLI accepts.
BUILTIN_AGENTS: dict[str, str] = {
    "react": "podium.examples.react:agent",
    "order-support": "podium.examples.order_support:agent",
    "research": "podium.examples.research:agent",
}


def resolve_agent(spec: str) -> Agent:
    """``package.module:attribute`` (an Agent, or a function returning one) or a built-in name."""
    path = BUILTIN_AGENTS.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(BUILTIN_AGENTS))
        raise ConfigError(f"agent {spec!r}: use package.module:attribute or one of: {names}")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`, find the user's own modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"agent {spec!r}: cannot import {module_name!r}: {exc}") from exc
    try:
        target = getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"agent {spec!r}: {module_name} has no attribute {attr!r}") from exc
    if callable(target) and not isinstance(target, Agent):
        target = target()
    if not isinstance(target, Agent):
        raise ConfigError(f"agent {spec!r} is a {type(target).__name__}, not an Agent")
    return target
