"""A backend's declared capacity, shared among the worker processes of one host.

``[[models]] capacity`` is what the inference server decodes at once: a fact about
the server, not about one Podium process. Each worker process keeps its own pool of
the backend's connections and counts its own calls in flight, so with ``podium worker
--procs N`` every process gets its share of the capacity: ``capacity // N``, the
first ``capacity % N`` processes one more, so the shares add up to the capacity.
A process never gets less than 1 (a capacity below the number of processes is then
exceeded by the difference: declare at least one per process). Workers on other hosts
serving the same backend each take the whole capacity: divide it in their config.
"""

from __future__ import annotations

import msgspec

from podium.config import Config

__all__ = ("share_capacity",)


def share_capacity(config: Config, procs: int, index: int) -> Config:
    """``config`` with each ``[[models]]`` capacity cut to process ``index``'s share of
    ``procs`` (``config`` itself with one process)."""
    if procs <= 1 or not config.models:
        return config
    models = [
        msgspec.structs.replace(m, capacity=max(1, m.capacity // procs
                                                + (1 if index < m.capacity % procs else 0)))
        for m in config.models
    ]
    return msgspec.structs.replace(config, models=models)
