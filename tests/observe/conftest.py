"""Fixtures for the observability tests (Redis ones come from the root conftest)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # observe_agents, for in-process tests


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `podium` subprocess that imports ``observe_agents``."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}
