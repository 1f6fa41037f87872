"""The serving processes' collector settings: frozen start-up objects, raised thresholds."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from podium.gctune import SERVING_THRESHOLDS, tune_for_serving


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_tune_freezes_and_raises_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODIUM_GC", raising=False)
    assert tune_for_serving() == SERVING_THRESHOLDS
    assert gc.get_threshold() == SERVING_THRESHOLDS
    assert gc.get_freeze_count() > 0


def test_environment_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODIUM_GC", "1000,5,5")
    assert tune_for_serving() == (1000, 5, 5) == gc.get_threshold()
    gc.unfreeze()
    monkeypatch.setenv("PODIUM_GC", "default")
    before = gc.get_threshold()
    assert tune_for_serving() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("setting", ["abc", "1,2", "1,2,3,4", "1,-2,3", "1.5,2,3"])
def test_a_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    from podium.errors import ConfigError

    monkeypatch.setenv("PODIUM_GC", setting)
    before = gc.get_threshold()
    with pytest.raises(ConfigError, match="PODIUM_GC"):
        tune_for_serving()
    assert gc.get_threshold() == before  # nothing changed on the way to the error
