"""``[[models]] capacity`` is the backend's, across a host's worker processes: with
``--procs N`` each process gets its share, and the shares add up to the capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from podium.config import load_config
from podium.factory import build_models
from podium.models.pool import BackendPool
from podium.worker.capacity import share_capacity

CONFIG = """
[[models]]
name = "qwen"
model = "qwen"
base_url = "http://127.0.0.1:9/v1"
capacity = 64

[[models]]
name = "small"
model = "small"
base_url = "http://127.0.0.1:9/v1"
capacity = 5
"""


@pytest.mark.parametrize("procs", [1, 2, 3, 7])
def test_the_processes_shares_add_up_to_the_declared_capacity(
    tmp_path: Path, procs: int
) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(CONFIG)
    config = load_config(str(path))
    shares: dict[str, list[int]] = {"qwen": [], "small": []}
    for index in range(procs):
        models = build_models(share_capacity(config, procs, index))
        for name, model in models.items():
            assert isinstance(model, BackendPool)
            shares[name].extend(b.capacity for b in model.backends)
    assert sum(shares["qwen"]) == 64
    assert max(shares["qwen"]) - min(shares["qwen"]) <= 1  # even
    # Fewer sequences than processes: each still gets one (the docs say to declare more).
    assert sum(shares["small"]) == max(5, procs)


def test_one_process_keeps_the_config_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(CONFIG)
    config = load_config(str(path))
    assert share_capacity(config, 1, 0) is config
