"""The fleet fixture: network namespaces with real Redis, gateways and workers in them
(root only; skipped with the reason elsewhere). Built once per module, torn down in its
finalizer whatever the tests did."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .netns import fleet_unavailable
from .podium_fleet import PodiumFleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodiumFleet]:
    pytest.importorskip("redis")
    if why := fleet_unavailable():
        pytest.skip(why)
    with PodiumFleet(tmp_path_factory.mktemp("fleet")) as built:
        yield built


@pytest.fixture
def workers_up(fleet: PodiumFleet) -> PodiumFleet:
    """The fleet with a worker running on every worker host (a test may have stopped one)."""
    fleet.ensure_workers()
    return fleet
