"""The public API is exactly what ``podium.__all__`` names, and every name resolves."""

from __future__ import annotations

import importlib

import podium

PACKAGES = (
    "podium",
    "podium.context",
    "podium.engine",
    "podium.memory",
    "podium.models",
    "podium.plan",
    "podium.queue",
    "podium.security",
    "podium.streaming",
    "podium.threads",
    "podium.tools",
    "podium.worker",
)


def test_every_exported_name_exists_once() -> None:
    for name in PACKAGES:
        module = importlib.import_module(name)
        exported = module.__all__
        assert len(set(exported)) == len(exported), name
        for attr in exported:
            assert hasattr(module, attr), f"{name}.{attr}"


def test_top_level_api_covers_the_agent_surface() -> None:
    for attr in ("Agent", "ContextPolicy", "Engine", "tool", "SimulatedModel", "FunctionModel"):
        assert attr in podium.__all__
