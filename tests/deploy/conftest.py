"""Keep the container tests on one xdist worker: they share one dockerd and one image.

pytest-xdist's ``--dist loadgroup`` (pyproject's addopts) sends the tests whose node ids
end in ``@group`` to one worker; it appends that suffix itself by setting
``item._nodeid``, which pytest 9 no longer reads (the id lives in ``item._id``). Here the
suffix is appended where pytest 9 keeps it; under pytest 8 xdist's own does it.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest 8: xdist's own hook has done it
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")  # type: ignore[attr-defined]
