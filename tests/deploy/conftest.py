"""Keep the container tests on one xdist worker: they share one dockerd and one image.

pytest-xdist's ``--dist loadgroup`` (pyproject's addopts) sends the tests whose node ids
end in ``@group`` to one worker; it appends that suffix itself by setting
``item._nodeid``, which pytest 9 no longer reads (the id lives in ``item._id``). Here the
suffix is appended where pytest 9 keeps it; under pytest 8 xdist's own does it.
"""

from __future__ import annotations

import pytest


def _groups(item: pytest.Item) -> list[str]:
    return sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                   for m in item.iter_markers("xdist_group")})


def _containers_half_way(items: list[pytest.Item]) -> None:
    """Move the container tests half way into the run by count (about a third of its
    time: the first half holds most of the quick unit tests); they were near its start.
    Their first minutes wait for the base root filesystem that tests/deploy/prefetch.py
    makes in the background from the run's start: a worker that reached them early sat
    waiting for it (4.4 min of set-up on a loaded machine, prefetch or not); later, it is
    made, and the other worker still has most of the suite to balance the containers'
    minutes against. Nothing else changes places."""
    containers = [i for i in items if "docker" in _groups(i)]
    if not containers or len(containers) == len(items):
        return
    rest = [i for i in items if i not in containers]
    at = len(rest) // 2
    items[:] = [*rest[:at], *containers, *rest[at:]]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _containers_half_way(items)
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest 8: xdist's own hook has done it
        return
    for item in items:
        groups = _groups(item)
        if groups and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")  # type: ignore[attr-defined]
