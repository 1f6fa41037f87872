"""Least-attained-service queueing of model calls (sans I/O).

When every backend is at capacity, calls wait here. The next free slot goes
to the waiting call whose run has received the least service so far, as in
Autellix's program-level LAS: a short agent task is never stuck behind the
tenth step of a long one. Service is bucketed into levels with exponentially
growing quanta (level 0 below ``quantum_s``, level k below
``quantum_s × 2^k``), first come first served within a level, so ordering
is stable and runs of similar age keep their turn. Within a level a call
whose run last ran on the freed backend is preferred (prefix-cache reuse)
if it is among the first ``affinity_lookahead`` waiters.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ("LASQueue", "Waiter", "service_level")

T = TypeVar("T")


def service_level(attained_s: float, quantum_s: float) -> int:
    """The priority level of a run that has received ``attained_s`` seconds of service."""
    if attained_s < quantum_s or quantum_s <= 0:
        return 0
    return int(math.log2(attained_s / quantum_s)) + 1


class Waiter(Generic[T]):
    """One queued call; ``payload`` is whatever the pool needs to hand it a slot."""

    __slots__ = ("affinity", "level", "payload", "removed", "seq")

    def __init__(self, payload: T, level: int, affinity: str | None, seq: int) -> None:
        self.payload = payload
        self.level = level
        self.affinity = affinity
        self.seq = seq
        self.removed = False


class LASQueue(Generic[T]):
    """Waiters by service level; ``pop`` takes the best one a backend may serve."""

    def __init__(self, *, affinity_lookahead: int = 16) -> None:
        self._levels: dict[int, deque[Waiter[T]]] = {}
        self._seq = 0
        self._len = 0
        self.affinity_lookahead = affinity_lookahead

    def __len__(self) -> int:
        return self._len

    def push(self, payload: T, level: int, affinity: str | None = None) -> Waiter[T]:
        self._seq += 1
        waiter = Waiter(payload, level, affinity, self._seq)
        self._levels.setdefault(level, deque()).append(waiter)
        self._len += 1
        return waiter

    def remove(self, waiter: Waiter[T]) -> None:
        """Forget a waiter (timed out, cancelled); it is skipped lazily."""
        if not waiter.removed:
            waiter.removed = True
            self._len -= 1

    def peek_key(self, backend: str, eligible: Callable[[T], bool]) -> tuple[int, int] | None:
        """(level, seq) of the waiter :meth:`pop` would return, without taking it."""
        found = self._find(backend, eligible)
        return None if found is None else (found[1].level, found[1].seq)

    def pop(self, backend: str, eligible: Callable[[T], bool]) -> T | None:
        """Take the best waiter ``backend`` may serve: lowest level, affine, then oldest."""
        found = self._find(backend, eligible)
        if found is None:
            return None
        dq, waiter, i = found
        del dq[i]
        waiter.removed = True
        self._len -= 1
        return waiter.payload

    def _find(
        self, backend: str, eligible: Callable[[T], bool]
    ) -> tuple[deque[Waiter[T]], Waiter[T], int] | None:
        for level in sorted(self._levels):
            dq = self._levels[level]
            while dq and dq[0].removed:
                dq.popleft()
            if not dq:
                del self._levels[level]
                continue
            first: tuple[deque[Waiter[T]], Waiter[T], int] | None = None
            for i, w in enumerate(dq):
                if w.removed or not eligible(w.payload):
                    continue
                if w.affinity == backend:
                    return dq, w, i
                if first is None:
                    first = (dq, w, i)
                if i >= self.affinity_lookahead:
                    break
            if first is not None:
                return first
        return None

    def drain(self) -> list[T]:
        """Remove and return every waiter (e.g. to fail them all)."""
        out: list[T] = []
        for dq in self._levels.values():
            for w in dq:
                if not w.removed:
                    # marked, so a caller that later removes its own waiter (as every
                    # failed caller does) does not count it a second time
                    w.removed = True
                    out.append(w.payload)
        self._levels.clear()
        self._len = 0
        return out
