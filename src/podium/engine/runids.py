"""Run ids: ``run_`` and 128 random bits in hex, drawn from the OS's CSPRNG in batches.

Random rather than counted, so the ids one tenant sees say nothing about how many
runs other tenants start (nor let anyone guess another run's id). ``os.urandom``
is a system call (about a microsecond on a virtual machine), so ids are cut from a
4 KiB batch: the same bits, one call per 256 runs. A forked child drops the batch
it inherited, so no two processes hand out the same id.
"""

from __future__ import annotations

import os

__all__ = ("new_run_id",)

_ID_BYTES = 16
_BATCH = 256 * _ID_BYTES


class _Pool:
    __slots__ = ("at", "bits")

    def __init__(self) -> None:
        self.bits = b""
        self.at = 0

    def reset(self) -> None:
        self.bits = b""
        self.at = 0


_pool = _Pool()
os.register_at_fork(after_in_child=_pool.reset)


def new_run_id() -> str:
    """An unguessable run id: ``run_`` and 128 random bits in hex."""
    pool = _pool
    at = pool.at
    if at >= len(pool.bits):
        pool.bits = os.urandom(_BATCH)
        at = 0
    pool.at = at + _ID_BYTES
    return "run_" + pool.bits[at : at + _ID_BYTES].hex()
