"""Finished spans built from measured timings, for :class:`~podium.observe.tracing.RunTracer`.

A run's spans are known only once its steps are measured, so they are built after the
fact with their measured start and end times. Two ways to hand them over:

- :class:`SdkSpans`, for the OpenTelemetry SDK's tracer (what ``podium serve`` and
  ``podium worker`` install): the run's sampling is decided once, with the provider's
  own sampler, when the run starts; a sampled run's spans go to the provider's span
  processors as finished ``ReadableSpan`` objects. That skips the live ``Span`` (its
  lock, attribute validation, ``on_start``), a fifth of the cost of starting and ending
  one. Processors see these spans at ``on_end`` only, which is all that the batch and
  simple processors (and so every exporter) use.
- :class:`ApiSpans`, for any other tracer implementation: the plain API, span by span.

Either way an unsampled run costs one sampling decision and nothing per step.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from podium.observe.sampling import RateLimitedSampler

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.records import RunRecord

__all__ = ("ApiSpans", "RunSpan", "SdkSpans", "run_attributes", "spans_for")

_UNSET = Status(StatusCode.UNSET)
_RANDOM_TRACE_ID = 0x02
_LOW_64 = (1 << 64) - 1  # the bits of a trace id that TraceIdRatioBased compares


def _root_decider(sampler: Sampler) -> Callable[[int], bool] | None:
    """How a parent-based ratio sampler decides a root span, called directly (no context
    look-ups, no result object per run); None for any other sampler (then it is called).
    Podium's rate-limited default is asked before a trace id is drawn (see open_run)."""
    bound = _parent_based_root_bound(sampler)
    if bound is None:
        return None
    return lambda trace_id: trace_id & _LOW_64 < bound


def _parent_based_root_bound(sampler: Sampler) -> int | None:
    """For the standard ``parentbased_traceidratio`` and ``parentbased_always_on`` samplers
    (recognized by their description), the trace-id bound under which a root run is kept, so
    that their decision costs one comparison instead of two context look-ups and a result
    object per run; None for any other sampler (then it is called)."""
    description = sampler.get_description()
    if description == ParentBased(ALWAYS_ON).get_description():  # type: ignore[no-untyped-call]
        return _LOW_64 + 1
    found = re.match(r"ParentBased\{root:TraceIdRatioBased\{([^}]*)\}", description)
    if found is None:
        return None
    try:
        root = TraceIdRatioBased(float(found[1]))
    except ValueError:
        return None
    standard = ParentBased(root).get_description()  # type: ignore[no-untyped-call]
    return root.bound if standard == description else None


def run_attributes(agent: Agent, record: RunRecord) -> dict[str, Any]:
    """The attributes a run span starts with (GenAI conventions; never message content):
    those a sampler may read (operation, agent, provider, model) are there from the start."""
    model = agent.model
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.name,
        "gen_ai.provider.name": model.provider,
        "gen_ai.request.model": model.traced_model,
        "gen_ai.conversation.id": record.run_id,
        "podium.run.id": record.run_id,
        "podium.tenant": record.tenant,
        "podium.pool": record.pool,
    }


def _ns(ts: float | None) -> int:
    return int(ts * 1e9) if ts else time.time_ns()


class RunSpan:
    """A sampled run's span while the run is driven: its context (the parent of its step
    spans), its start and, for :class:`ApiSpans`, the live span."""

    __slots__ = ("attributes", "calls", "context", "last_end", "live", "parent", "start_ns",
                 "tokens_in", "tokens_out")

    def __init__(
        self, context: SpanContext, parent: SpanContext | None, start_ns: int,
        attributes: dict[str, Any], live: Any = None,
    ) -> None:
        self.context = context
        self.parent = parent
        self.start_ns = start_ns
        self.attributes = attributes
        self.live = live
        #: The run's token usage at the last step (each chat span carries its step's share).
        self.tokens_in = 0
        self.tokens_out = 0
        #: What its calls ask for their spans' context (podium.observe.tracing._RunCalls).
        self.calls: Any = None
        #: When its last step's span ended (the run's span ends no earlier).
        self.last_end = 0


class SdkSpans:
    """Spans handed to the SDK tracer's span processors as finished spans."""

    def __init__(self, tracer: SdkTracer) -> None:
        self._sampler = tracer.sampler
        self._ids = tracer.id_generator
        self._processor = tracer.span_processor
        self._resource = tracer.resource
        self._scope = InstrumentationScope("podium")
        self._root_decides = _root_decider(tracer.sampler)
        #: Podium's default sampler decides a root run without its trace id: most runs of a
        #: busy process are then turned down with no id drawn.
        sampler = tracer.sampler
        self._root_take = sampler.take if isinstance(sampler, RateLimitedSampler) else None
        is_random = getattr(self._ids, "is_trace_id_random", None)  # SDK 1.39+
        self._random_ids = bool(is_random()) if callable(is_random) else False

    def open_run(
        self, agent: Agent, record: RunRecord, parent: Context | None
    ) -> tuple[SpanContext | None, RunSpan | None]:
        """Decide the run's sampling (once, as ``start_span`` would with the provider's
        sampler): the span context its calls should propagate, and a :class:`RunSpan` when
        it is recorded. An unsampled run passes on its caller's context (or none), and
        allocates nothing else."""
        parent_sc = trace.get_current_span(parent).get_span_context() if parent else None
        if parent_sc is not None and not parent_sc.is_valid:
            parent_sc = None
        take, decides = self._root_take, self._root_decides
        if take is not None and parent_sc is None and not take():  # no trace id drawn
            return None, None
        trace_id = parent_sc.trace_id if parent_sc else self._ids.generate_trace_id()
        trace_state = parent_sc.trace_state if parent_sc else None
        if take is not None or decides is not None:  # parent-based ones we know: decided here
            if parent_sc is not None:
                sampled = parent_sc.trace_flags.sampled
            else:
                sampled = decides is None or decides(trace_id)  # (take() said yes)
            if not sampled:
                return parent_sc, None
            attributes = run_attributes(agent, record)
        else:
            attributes = run_attributes(agent, record)
            result = self._sampler.should_sample(parent, trace_id, f"invoke_agent {agent.name}",
                                                 SpanKind.INTERNAL, attributes)
            decision = result.decision
            if not decision.is_recording():  # type: ignore[no-untyped-call]
                return parent_sc, None
            sampled = decision.is_sampled()  # type: ignore[no-untyped-call]
            trace_state = result.trace_state
            if result.attributes:
                attributes.update(result.attributes)
        flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
        # W3C trace-context level 2 "random trace id" flag, kept as the SDK keeps it.
        if parent_sc is not None:
            flags |= parent_sc.trace_flags & _RANDOM_TRACE_ID
        elif self._random_ids:
            flags |= _RANDOM_TRACE_ID
        context = SpanContext(trace_id, self._ids.generate_span_id(), False, TraceFlags(flags),
                              trace_state)
        return context, RunSpan(context, parent_sc, _ns(record.started_at), attributes)

    def reserve(self, name: str, parent: SpanContext, start_ns: int) -> SpanContext:
        """The context of a span to be finished later by :meth:`child` (``context=``): a
        child run started inside a step needs its parent span's context while it runs."""
        return SpanContext(parent.trace_id, self._ids.generate_span_id(), False,
                           parent.trace_flags, parent.trace_state)

    def child(
        self, name: str, parent: SpanContext, kind: SpanKind, start_ns: int, end_ns: int,
        attributes: dict[str, Any], error: str | None = None,
        context: SpanContext | None = None,
    ) -> SpanContext:
        if context is None:
            context = SpanContext(parent.trace_id, self._ids.generate_span_id(), False,
                                  parent.trace_flags, parent.trace_state)
        self._end(name, context, parent, kind, start_ns, end_ns, attributes, error)
        return context

    def close_run(self, run: RunSpan, name: str, end_ns: int, attributes: dict[str, Any],
                  error: str | None) -> None:
        attributes = {**run.attributes, **attributes}
        self._end(name, run.context, run.parent, SpanKind.INTERNAL, run.start_ns, end_ns,
                  attributes, error)

    def _end(
        self, name: str, context: SpanContext, parent: SpanContext | None, kind: SpanKind,
        start_ns: int, end_ns: int, attributes: dict[str, Any], error: str | None,
    ) -> None:
        status = _UNSET if error is None else Status(StatusCode.ERROR, error)
        self._processor.on_end(ReadableSpan(
            name, context, parent, self._resource, attributes, kind=kind, status=status,
            start_time=start_ns, end_time=end_ns, instrumentation_scope=self._scope,
        ))


class ApiSpans:
    """Spans through the plain OpenTelemetry API (any tracer implementation)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._reserved: dict[int, trace.Span] = {}  # live spans by span id, see reserve()

    def open_run(
        self, agent: Agent, record: RunRecord, parent: Context | None
    ) -> tuple[SpanContext | None, RunSpan | None]:
        attributes = run_attributes(agent, record)
        start_ns = _ns(record.started_at)
        span = self._tracer.start_span(f"invoke_agent {agent.name}", context=parent,
                                       kind=SpanKind.INTERNAL, start_time=start_ns,
                                       attributes=attributes)
        context = span.get_span_context()
        if not span.is_recording():
            return (context if context.is_valid else None), None
        return context, RunSpan(context, None, start_ns, attributes, span)

    def reserve(self, name: str, parent: SpanContext, start_ns: int) -> SpanContext:
        """Start a span now, to be finished by :meth:`child` (``context=`` its context)."""
        ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        span = self._tracer.start_span(name, context=ctx, start_time=start_ns)
        context = span.get_span_context()
        self._reserved[context.span_id] = span
        return context

    def child(
        self, name: str, parent: SpanContext, kind: SpanKind, start_ns: int, end_ns: int,
        attributes: dict[str, Any], error: str | None = None,
        context: SpanContext | None = None,
    ) -> SpanContext:
        span = self._reserved.pop(context.span_id, None) if context is not None else None
        if span is None:
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent))
            span = self._tracer.start_span(name, context=ctx, kind=kind, start_time=start_ns,
                                           attributes=attributes)
        else:
            span.update_name(name)  # (reserved before its name was known for sure)
            span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
        return span.get_span_context()

    def close_run(self, run: RunSpan, name: str, end_ns: int, attributes: dict[str, Any],
                  error: str | None) -> None:
        span = run.live
        span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)


def spans_for(tracer: trace.Tracer) -> SdkSpans | ApiSpans:
    """The fastest way to hand ``tracer`` its spans."""
    if isinstance(tracer, SdkTracer):
        return SdkSpans(tracer)
    return ApiSpans(tracer)
