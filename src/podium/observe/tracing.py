"""OpenTelemetry traces of runs, following the GenAI semantic conventions.

A run is an ``invoke_agent {agent}`` span; each step a child ``step {n}`` span
carrying its phases' wall and CPU milliseconds (``podium.phases``:
``"assemble=0.012/0.011 model=…"``, wall/CPU per phase); inside it a ``chat {model}`` span for
the model call (``gen_ai.request.model``, token usage, time to first token)
and an ``execute_tool {tool}`` span per tool call (``gen_ai.tool.call.id``,
outcome, attempts). Message content is never recorded.

The spans are built from the step's profile when the step is checkpointed
(their start and end times are the measured ones), so tracing adds nothing
inside a step, and nothing at all when it is off: this module imports
OpenTelemetry only when :func:`tracer_from_env` finds it configured.

A sub-agent's run (a child run) is an ``invoke_agent`` span under the
``execute_tool`` span of the parent's call that started it: that call's span (and
its step's) is opened when the child starts (:func:`child_trace_context`), not
after the step, so the child's trace context exists while it runs.

A run whose record carries a W3C ``traceparent`` in its metadata (the gateway
stores the request's) continues that trace, in whichever worker drives it; the
run's model calls send its own ``traceparent`` to the backend.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from podium.engine.profile import STEP_PHASES

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.messages import Usage
    from podium.tools.executor import ToolResult
    from podium.tools.tool import ToolContext

__all__ = (
    "RunTracer",
    "child_trace_context",
    "inject_traceparent",
    "submit_context",
    "trace_headers",
    "tracer_from_env",
    "tracing_configured",
)

_MODEL, _TOOLS = STEP_PHASES.index("model"), STEP_PHASES.index("tools")
#: Metadata keys that carry the W3C trace context of a run.
TRACE_KEYS = ("traceparent", "tracestate")


def tracing_configured(env: dict[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces (an OTLP endpoint, or a
    traces exporter other than ``none``), or ``PODIUM_TRACING=1``."""
    e = os.environ if env is None else env
    if e.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if e.get("PODIUM_TRACING", "") in ("1", "true"):
        return True
    exporter = e.get("OTEL_TRACES_EXPORTER", "")
    if exporter and exporter.lower() != "none":
        return True
    return bool(e.get("OTEL_EXPORTER_OTLP_ENDPOINT") or e.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracer_from_env() -> RunTracer | None:
    """A :class:`RunTracer` when tracing is configured, else None (and nothing imported).

    Uses the global tracer provider if the application installed one; otherwise installs
    an SDK provider exporting OTLP over HTTP, configured by the standard ``OTEL_*``
    variables (endpoint, headers, service name, sampler)."""
    if not tracing_configured():
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # nobody configured one: we do
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        sdk = TracerProvider(resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", "podium")}))
        sdk.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(sdk)
        provider = sdk
    return RunTracer(provider)


def inject_traceparent(metadata: dict[str, str]) -> None:
    """Store the current trace context (if any) in a run's metadata, for its worker."""
    from opentelemetry.propagate import inject

    inject(metadata)


#: The W3C ``traceparent`` of the run this task drives (set by :meth:`RunTracer.run_started`).
_TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "podium_traceparent", default=None
)


def trace_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the current run's ``traceparent`` when it is traced; the same dict,
    untouched, when not (one context-variable read: nothing to pay with tracing off)."""
    parent = _TRACEPARENT.get()
    if parent is None:
        return headers
    return {**headers, "traceparent": parent}


def _ns(ts: float | None) -> int:
    return int(ts * 1e9) if ts else time.time_ns()


class RunTracer:
    """The engine hook that turns runs and steps into spans (``engine.hook = tracer``)."""

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.propagate import extract, inject
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._trace = trace
        self._extract = extract
        self._inject = inject
        self._kind = SpanKind
        self._status = (Status, StatusCode)
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("podium")
        self._runs: dict[str, tuple[Any, Any, Usage | None]] = {}
        # Steps whose spans opened early, for their child runs: (run, step) -> (step span,
        # {call index: execute_tool span}).
        self._open: dict[tuple[str, int], tuple[Any, dict[int, Any]]] = {}

    def open_tool_span(self, record: RunRecord, ctx: ToolContext, tool: str) -> dict[str, str]:
        """Open the span of call ``ctx`` of ``record``'s run now (a child run starts under
        it); returns the trace context to store in the child's metadata."""
        _, run_ctx, _ = self._run_span(record, record.active_agent or record.agent)
        key = (record.run_id, ctx.step)
        opened = self._open.get(key)
        if opened is None:
            step_span = self.tracer.start_span(f"step {ctx.step}", context=run_ctx)
            opened = self._open[key] = (step_span, {})
        span = self.tracer.start_span(
            f"execute_tool {tool}", context=self._trace.set_span_in_context(opened[0]),
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.id": ctx.call_id, "gen_ai.tool.type": "agent"},
        )
        opened[1][ctx.call_index] = span
        carrier: dict[str, str] = {}
        self._inject(carrier, context=self._trace.set_span_in_context(span))
        return carrier

    def _run_span(self, record: RunRecord, agent_name: str) -> tuple[Any, Any, Usage | None]:
        found = self._runs.get(record.run_id)
        if found is not None:
            return found
        carrier = {k: record.metadata[k] for k in TRACE_KEYS if k in record.metadata}
        parent = self._extract(carrier) if carrier else None
        span = self.tracer.start_span(
            f"invoke_agent {agent_name}", context=parent, kind=self._kind.INTERNAL,
            start_time=_ns(record.started_at),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent_name,
                "gen_ai.conversation.id": record.run_id,
                "podium.run.id": record.run_id,
                "podium.tenant": record.tenant,
                "podium.pool": record.pool,
            },
        )
        entry = (span, self._trace.set_span_in_context(span), None)
        self._runs[record.run_id] = entry
        return entry

    def run_started(self, agent: Agent, record: RunRecord) -> None:
        """Open the run's span now, and let its model and tool calls carry its context."""
        span = self._run_span(record, agent.name)[0]
        sc = span.get_span_context()
        if sc.is_valid:
            _TRACEPARENT.set(f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}")

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: Usage,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        run_span, ctx, prev = self._run_span(record, agent.name)
        self._runs[record.run_id] = (run_span, ctx, usage)
        if not run_span.is_recording():  # sampled out (OTEL_TRACES_SAMPLER): no child spans
            return
        end = time.time_ns()
        wall = profile.wall_ns
        start = end - sum(wall)
        # One string, not twelve numbers: the SDK validates every attribute value (and every
        # element of an array), which costs more than the rest of the span.
        attrs: dict[str, Any] = {
            "podium.step": profile.step,
            "podium.tool_calls": len(results),
            "podium.phases": " ".join(
                f"{n}={w / 1e6:.3f}/{min(c, w) / 1e6:.3f}"
                for n, w, c in zip(STEP_PHASES, wall, profile.cpu_ns, strict=False)
            ),
        }
        opened = self._open.pop((record.run_id, profile.step), None) if self._open else None
        if opened is None:
            step_span = self.tracer.start_span(f"step {profile.step}", context=ctx,
                                               start_time=start, attributes=attrs)
            early: dict[int, Any] = {}
        else:  # opened when its first child run started
            step_span, early = opened
            step_span.set_attributes(attrs)
        step_ctx = self._trace.set_span_in_context(step_span)
        model_start = start + wall[0]
        model = agent.model.name
        chat: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": usage.input_tokens - (prev.input_tokens if prev else 0),
            "gen_ai.usage.output_tokens": usage.output_tokens - (prev.output_tokens if prev else 0),
        }
        if profile.ttft_ns:
            chat["gen_ai.server.time_to_first_token"] = profile.ttft_ns / 1e9
        self.tracer.start_span(
            f"chat {model}", context=step_ctx, kind=self._kind.CLIENT, start_time=model_start,
            attributes=chat,
        ).end(end_time=model_start + wall[_MODEL])
        tools_start = start + sum(wall[:_TOOLS])
        status_cls, code = self._status
        for index, result in results:
            outcome: dict[str, Any] = {
                "podium.tool.outcome": "ok" if result.ok else (result.error or "error"),
                "podium.tool.attempts": result.attempts,
            }
            span = early.pop(index, None)
            if span is not None:
                span.set_attributes(outcome)
                if not result.ok:
                    span.set_status(status_cls(code.ERROR, result.error or "error"))
                    span.set_attribute("error.type", result.error or "error")
                span.end()
                continue
            span = self.tracer.start_span(
                f"execute_tool {result.name}", context=step_ctx, start_time=tools_start,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": result.name,
                    "gen_ai.tool.call.id": result.call_id,
                    "gen_ai.tool.type": "function",
                    **outcome,
                },
            )
            if not result.ok:
                span.set_status(status_cls(code.ERROR, result.error or "error"))
                span.set_attribute("error.type", result.error or "error")
            span.end(end_time=tools_start + (result.wall_ns or wall[_TOOLS]))
        for span in early.values():  # a call with no outcome in this step (cannot happen)
            span.end()
        step_span.end(end_time=end)

    def run_finished(self, record: RunRecord) -> None:
        if self._open:  # a step cut short (cancelled while its children ran): end its spans
            for key in [k for k in self._open if k[0] == record.run_id]:
                step_span, early = self._open.pop(key)
                for span in early.values():
                    span.end()
                step_span.end()
        entry = self._runs.pop(record.run_id, None)
        span = (entry or self._run_span(record, record.agent))[0]
        self._runs.pop(record.run_id, None)
        span.set_attribute("podium.run.status", record.status)
        span.set_attribute("podium.run.steps", record.steps)
        span.set_attribute("gen_ai.usage.input_tokens", record.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", record.usage.output_tokens)
        if record.status != "completed":
            status_cls, code = self._status
            span.set_status(status_cls(code.ERROR, record.reason or record.status))
            span.set_attribute("error.type", record.reason or record.status)
        span.end(end_time=_ns(record.finished_at))


def child_trace_context(
    hook: object, parent: RunRecord, ctx: ToolContext, tool: str
) -> dict[str, str]:
    """The trace context a child run started by call ``ctx`` of ``parent`` carries in its
    metadata: its ``execute_tool`` span's, when one of ``hook``'s hooks traces; else none."""
    for one in getattr(hook, "hooks", (hook,)):
        if isinstance(one, RunTracer):
            return one.open_tool_span(parent, ctx, tool)
    return {}


@contextlib.contextmanager
def submit_context(
    tracer: RunTracer | None, headers: Mapping[str, str], metadata: Mapping[str, str], agent: str
) -> Iterator[dict[str, str]]:
    """The metadata a run submitted through the gateway carries: the caller's W3C trace
    context, continued by a ``POST /v1/runs`` server span when the gateway traces. The
    worker that drives the run (any process, via the queue) parents its run span there."""
    meta = dict(metadata)
    if tracer is None:
        for key in TRACE_KEYS:
            value = headers.get(key)
            if value:
                meta.setdefault(key, value)
        yield meta
        return
    from opentelemetry.propagate import extract, inject

    span = tracer.tracer.start_span(
        "POST /v1/runs", context=extract(headers), kind=tracer._kind.SERVER,
        attributes={"http.request.method": "POST", "http.route": "/v1/runs",
                    "gen_ai.agent.name": agent},
    )
    inject(meta, context=tracer._trace.set_span_in_context(span))
    try:
        yield meta
    except BaseException as exc:
        status_cls, code = tracer._status
        span.set_status(status_cls(code.ERROR, type(exc).__name__))
        raise
    finally:
        span.end()
