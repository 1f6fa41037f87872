"""Tests against a real Redis: ``shared_redis_url``, ``prefix`` and ``private_redis``
come from the root conftest (:mod:`redis_fixtures`); without redis-py these are skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("redis")


@pytest.fixture
def effects_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the ``effect`` tool of :mod:`.app` logs each call it makes (this process's
    tools), with a 10 ms call."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("PODIUM_TEST_EFFECTS", str(path))
    monkeypatch.setenv("PODIUM_TEST_TOOL_DELAY", "0.01")
    return path
