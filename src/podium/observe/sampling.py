"""Podium's default trace sampler: every run its caller traces, and a few others a second.

A ratio sampler's cost grows with the traffic: at thousands of steps a second per core,
tracing even one run in a hundred costs a worker several per cent of its CPU, while at
ten runs a minute it traces nothing for minutes. :class:`RateLimitedSampler` is
parent-based (a run whose caller's ``traceparent`` is sampled is always traced, one
whose caller decided not is not) and traces root runs up to ``per_second`` a second
(a token bucket with ``burst`` tokens): every run of a quiet service, a bounded trickle
of a busy one, so the price of tracing is bounded per second instead of per step.

Installed by :func:`podium.observe.tracing.tracer_from_env` when ``OTEL_TRACES_SAMPLER``
is unset; ``PODIUM_TRACES_PER_SECOND`` sets the rate (per process). Any standard
``OTEL_TRACES_SAMPLER`` replaces it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState

__all__ = ("DEFAULT_TRACES_PER_SECOND", "RateLimitedSampler")

#: Root runs traced per second and process by default; a burst of ten passes at once.
DEFAULT_TRACES_PER_SECOND = 1.0
_BURST = 10.0


class RateLimitedSampler(Sampler):
    """Parent-based; root spans sampled up to ``per_second`` a second (``burst`` at once)."""

    def __init__(self, per_second: float = DEFAULT_TRACES_PER_SECOND,
                 burst: float = _BURST, clock: Callable[[], float] = time.monotonic) -> None:
        if per_second < 0 or burst < 1:
            raise ValueError("per_second must be >= 0 and burst >= 1")
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()
        #: Before this (monotonic) time the bucket holds less than a token: a busy process
        #: answers most runs with one clock read and one comparison, no lock.
        self._empty_until = 0.0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Whether a root span may be sampled now (and count it)."""
        if self._clock() < self._empty_until:  # a racy read only sends a run to the lock
            return False
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            if self.per_second > 0:
                self._empty_until = now + (1.0 - self._tokens) / self.per_second
            else:
                self._empty_until = float("inf")
            return False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if parent.is_valid:
            sampled = parent.trace_flags.sampled
            state = parent.trace_state
        else:
            sampled, state = self.take(), None
        # The SDK gives a span the attributes its sampler returns, not those it was started
        # with: a sampler that returns none empties every span (the standard ones pass
        # them through, and so does this one).
        if not sampled:
            return SamplingResult(Decision.DROP, None, state)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, state)

    def get_description(self) -> str:
        return f"ParentBased{{root:RateLimited{{{self.per_second}/s,burst {self.burst}}}}}"
