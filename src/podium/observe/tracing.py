"""OpenTelemetry traces of runs, following the GenAI semantic conventions.

A run is an ``invoke_agent {agent}`` span; each step a child ``step {n}`` span
carrying its phases' wall and CPU milliseconds (``podium.phases``:
``"assemble=0.012/0.011 model=…"``, wall/CPU per phase); inside it a ``chat {model}`` span for
the model call (``gen_ai.request.model``, token usage, time to first token)
and an ``execute_tool {tool}`` span per tool call (``gen_ai.tool.call.id``,
outcome, attempts). Message content is never recorded.

Whether a run is traced is decided once, when it starts (head-based sampling by the
provider's sampler). The spans of a traced run are built from the step's profile when the
step is checkpointed (their start and end times are the measured ones), so tracing adds
nothing inside a step; an untraced run costs one sampling decision and nothing per step;
and with tracing off nothing at all: this module imports OpenTelemetry only when
:func:`tracer_from_env` finds it configured.

When Podium installs the SDK itself (``OTEL_*`` configured, no provider installed by the
application) and ``OTEL_TRACES_SAMPLER`` is unset, it samples with
:class:`~podium.observe.sampling.RateLimitedSampler`: every run whose caller's
``traceparent`` is sampled, and up to ``PODIUM_TRACES_PER_SECOND`` (default 1, a burst
of 10) other runs a second per process. A traced step costs tens of microseconds of CPU
(mostly the OTLP exporter's encoding), an untraced one almost nothing, so the price is
bounded per second, not per step; see docs/operations.md for the measured costs.

A sub-agent's run (a child run) is an ``invoke_agent`` span under the
``execute_tool`` span of the parent's call that started it: that call's span (and its
step's) gets its context when the child starts (:func:`child_trace_context`), and is
finished with the step, so the child's trace context exists while it runs.

A run whose record carries a W3C ``traceparent`` in its metadata (the gateway
stores the request's; an MCP ``tools/call`` to Podium's servers, its ``params._meta``'s)
continues that trace, in whichever worker drives it. A traced run's calls carry their
own spans' context: a model call's ``traceparent`` (and ``tracestate``) header names its
``chat`` span, a tool's HTTP requests (:func:`trace_headers`) and MCP calls
(``params._meta``, :func:`trace_meta`) its ``execute_tool`` span (in a step with several
calls at once, which one made a request is not known: their requests name a ``tools``
span of the step, the parent of their own). Those spans are reserved (their
ids drawn) when the call starts and finished with the step from its profile, so an
instrumented model server's span nests under the call that made it. An untraced run
passes on its caller's context, if any.

The spans carry ``gen_ai.provider.name``: the model's ``provider`` (``"openai"`` for an
OpenAI-compatible endpoint unless it names another, ``"podium"`` for the simulated and
function-backed models, a pool its backends' common one).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from podium.engine.profile import STEP_PHASES
from podium.observe.otel_env import default_sampler, tracing_configured

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.hook import StepHook, TokenCounts
    from podium.engine.profile import StepProfile
    from podium.engine.records import RunRecord
    from podium.observe.spans import RunSpan
    from podium.tools.executor import ToolResult
    from podium.tools.tool import ToolContext

__all__ = (
    "RunTracer",
    "child_trace_context",
    "default_sampler",
    "inject_traceparent",
    "meta_carrier",
    "submit_context",
    "trace_headers",
    "trace_meta",
    "tracer_from_env",
    "tracing_configured",
)

_MODEL, _TOOLS = STEP_PHASES.index("model"), STEP_PHASES.index("tools")
#: Metadata keys that carry the W3C trace context of a run.
TRACE_KEYS = ("traceparent", "tracestate")


def tracer_from_env() -> RunTracer | None:
    """A :class:`RunTracer` when tracing is configured, else None (and nothing imported).

    Uses the global tracer provider if the application installed one; otherwise installs
    an SDK provider exporting OTLP over HTTP, configured by the standard ``OTEL_*``
    variables (exporter, endpoint, headers, resource, sampler; without
    ``OTEL_TRACES_SAMPLER`` Podium's rate-limited, parent-based sampler: see
    :func:`default_sampler`, and :mod:`podium.observe.otel_env` for what is followed). A
    setting Podium would not follow is a :class:`~podium.errors.ConfigError`."""
    if not tracing_configured():
        return None
    from podium.observe.otel_env import check_tracing_env

    check_tracing_env()  # the SDK missing is a ConfigError, not an ImportError
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # nobody configured one: we do
        from podium.observe.otel_env import install_provider

        provider = install_provider()
    return RunTracer(provider)


def inject_traceparent(metadata: dict[str, str]) -> None:
    """Store the current trace context (if any) in a run's metadata, for its worker."""
    from opentelemetry.propagate import inject

    inject(metadata)


#: The trace context of the run this task drives (set by :meth:`RunTracer.run_started`):
#: a sampled run's :class:`_RunCalls` (each call asks it for its span's context), or an
#: unsampled run's caller's span context (trace id, span id, flags), formatted only when a
#: call sends it.
_TRACEPARENT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "podium_traceparent", default=None
)


#: A W3C ``traceparent`` (version 00's layout; a later version may append fields).
_W3C_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-|$)")
_MAX_META_VALUE = 8192  # the W3C baggage limit; tracestate's is 512


def _w3c(parent: Any) -> dict[str, str]:
    """A span context as W3C trace-context fields (``tracestate`` only when it has one)."""
    fields = {"traceparent": f"00-{parent.trace_id:032x}-{parent.span_id:016x}-"
                             f"{parent.trace_flags:02x}"}
    if parent.trace_state:
        fields["tracestate"] = parent.trace_state.to_header()
    return fields


def trace_headers(headers: dict[str, str], *, model: bool = False) -> dict[str, str]:
    """``headers`` plus the trace context of the call being made (``model``: a model
    call's, named by its ``chat`` span; else a tool's, by its step's span) when the run is
    traced, or its caller's when it passes one on; the same dict, untouched, when neither
    (one context-variable read: nothing to pay with tracing off)."""
    parent = _TRACEPARENT.get()
    if parent is None:
        return headers
    if type(parent) is _RunCalls:
        parent = parent.model() if model else parent.tool()
    return {**headers, **_w3c(parent)}


def trace_meta() -> dict[str, str] | None:
    """A tool's MCP request's trace context for its ``params._meta`` (``traceparent``,
    and ``tracestate`` when it has one: the OpenTelemetry semantic conventions for MCP,
    SEP-414), as :func:`trace_headers` makes it; None when the run is not traced (one
    context-variable read)."""
    parent = _TRACEPARENT.get()
    if parent is None:
        return None
    if type(parent) is _RunCalls:
        parent = parent.tool()
    return _w3c(parent)


class _RunCalls:
    """A sampled run's outgoing calls: the span each one's trace context names, reserved
    when the call starts (the step's span with it), finished with the step."""

    __slots__ = ("agent", "record", "step", "step_start", "tracer")

    def __init__(self, tracer: RunTracer, agent: Agent, record: RunRecord) -> None:
        self.tracer = tracer
        self.agent = agent
        self.record = record
        #: The step being driven: the next after the last one the tracer heard of; and
        #: when it started at the latest (the run's start, then the last step's end).
        self.step = record.steps
        self.step_start = time.time_ns()

    def model(self) -> Any:
        """The context of this step's ``chat`` span (a retried call sends the same)."""
        return self.tracer.reserve_call(self.record, self.step, _CHAT,
                                        f"chat {self.agent.model.traced_model}")

    def tool(self) -> Any:
        """The context of this step's tool call's span (its ``tools`` span when it has
        several)."""
        return self.tracer.reserve_call(self.record, self.step, _TOOL, "execute_tool")


#: The keys of a step's reserved ``chat`` span and its tool call's (whichever calls made
#: requests) among its reserved calls' (call indexes of the calls that started child runs).
_CHAT, _TOOL = -1, -2


def meta_carrier(meta: Mapping[str, Any] | None, headers: Mapping[str, str]) -> Mapping[str, str]:
    """Where an MCP server reads a ``tools/call``'s trace context: the request's
    ``params._meta`` when it carries a W3C ``traceparent`` (the semantic conventions prefer
    it to the transport's: one HTTP request is not one MCP call), else the HTTP ``headers``.
    Values from ``_meta`` are bounded as headers are (they may be stored with the run)."""
    if not meta:
        return headers
    traceparent = meta.get("traceparent")
    if not (isinstance(traceparent, str) and len(traceparent) <= _MAX_META_VALUE
            and _W3C_TRACEPARENT.match(traceparent)):
        return headers
    return {k: v for k in (*TRACE_KEYS, "baggage")
            if isinstance(v := meta.get(k), str) and len(v) <= _MAX_META_VALUE}


def _ns(ts: float | None) -> int:
    return int(ts * 1e9) if ts else time.time_ns()


class RunTracer:
    """The engine hook that turns runs and steps into spans (``engine.hook = tracer``).

    Sampling is decided once per run, when it starts, by the provider's sampler (head-based;
    with ``parentbased_*`` samplers a run whose stored ``traceparent`` is sampled is always
    traced): an unsampled run then costs nothing per step (the engine is told not to call).
    A sampled run's spans are built from each step's measured profile when the step is
    checkpointed."""

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        from podium.observe.spans import spans_for

        self._trace = trace
        self._extract = extract
        self._kind = SpanKind
        self._status = (Status, StatusCode)
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("podium")
        self._spans = spans_for(self.tracer)
        #: The sampled runs being driven by this process (unsampled ones are not kept).
        self._runs: dict[str, RunSpan] = {}
        #: Spans opened early, as calls start: (run, step) -> (step span, its start, {call
        #: index, or _CHAT: (its span, its start)}), finished with the step.
        self._open: dict[tuple[str, int], tuple[Any, int, dict[int, tuple[Any, int]]]] = {}

    def reserve_step(
        self, record: RunRecord, step: int
    ) -> tuple[Any, int, dict[int, tuple[Any, int]]]:
        """Step ``step`` of ``record``'s (sampled) run: its span, reserved now if it was
        not, when it started and its calls' reserved spans."""
        key = (record.run_id, step)
        opened = self._open.get(key)
        if opened is None:
            # Started when the step started (no later): its calls' spans end up inside it.
            run = self._runs[record.run_id]
            start = run.calls.step_start
            opened = self._open[key] = (self._spans.reserve(f"step {step}", run.context, start),
                                        start, {})
        return opened

    def reserve_call(self, record: RunRecord, step: int, index: int, name: str) -> Any:
        """The span of call ``index`` (or ``_CHAT``) of step ``step``, reserved now if it
        was not (under the step's)."""
        opened = self.reserve_step(record, step)
        call = opened[2].get(index)
        if call is None:
            # A tool's span may turn out to be its step's tools span, the parent of calls
            # that began before this request: it starts no later than its step.
            start = opened[1] if index == _TOOL else time.time_ns()
            call = opened[2][index] = (self._spans.reserve(name, opened[0], start), start)
        return call[0]

    def open_tool_span(self, record: RunRecord, ctx: ToolContext, tool: str) -> dict[str, str]:
        """Give call ``ctx`` of ``record``'s run its span now (a child run starts under it);
        returns the trace context to store in the child's metadata (none when the run is
        not sampled: the child then decides for itself)."""
        if record.run_id not in self._runs:
            return {}
        span = self.reserve_call(record, ctx.step, ctx.call_index, f"execute_tool {tool}")
        return {"traceparent": f"00-{span.trace_id:032x}-{span.span_id:016x}-"
                               f"{span.trace_flags:02x}"}

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        """Decide the run's sampling, and let its model and tool calls carry its context;
        a sampled run's steps become spans (:meth:`step`)."""
        meta = record.metadata
        parent = None
        if "traceparent" in meta:  # the configured propagators read it (W3C by default)
            parent = self._extract({k: meta[k] for k in TRACE_KEYS if k in meta})
        context, run = self._spans.open_run(agent, record, parent)
        # Unsampled runs pass their caller's decision on; None too: a task that drives runs
        # one after another must not send an earlier run's context. (A set costs a context
        # copy: skipped when there is nothing to change, the usual untraced run.)
        if run is None:
            if context is not None or _TRACEPARENT.get() is not None:
                _TRACEPARENT.set(context)
            return None  # not sampled: nothing to hear of its steps
        run.calls = _RunCalls(self, agent, record)
        _TRACEPARENT.set(run.calls)
        run.tokens_in, run.tokens_out = record.usage.input_tokens, record.usage.output_tokens
        self._runs[record.run_id] = run
        return self.step

    def step(
        self,
        agent: Agent,
        record: RunRecord,
        profile: StepProfile,
        usage: TokenCounts,
        results: Sequence[tuple[int, ToolResult]],
    ) -> None:
        run = self._runs.get(record.run_id)
        if run is None:  # not sampled
            return
        end = time.time_ns()
        calls = run.calls
        calls.step, calls.step_start = profile.step + 1, end  # (later calls: the next step's)
        run.last_end = end
        wall = profile.wall_ns
        start = end - sum(wall)
        spans, kind = self._spans, self._kind
        opened = self._open.pop((record.run_id, profile.step), None) if self._open else None
        early: dict[int, tuple[Any, int]] = opened[2] if opened else {}
        # One string, not twelve numbers: every attribute costs its export's encoding.
        step_ctx = spans.child(f"step {profile.step}", run.context, kind.INTERNAL,
                               min(start, opened[1]) if opened else start, end, {
            "podium.step": profile.step,
            "podium.tool_calls": len(results),
            "podium.phases": " ".join(
                f"{n}={w / 1e6:.3f}/{min(c, w) / 1e6:.3f}"
                for n, w, c in zip(STEP_PHASES, wall, profile.cpu_ns, strict=False)
            ),
        }, context=opened[0] if opened else None)
        model_start = start + wall[0]
        model = agent.model.traced_model
        chat: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": agent.model.provider,
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": usage.input_tokens - run.tokens_in,
            "gen_ai.usage.output_tokens": usage.output_tokens - run.tokens_out,
        }
        run.tokens_in, run.tokens_out = usage.input_tokens, usage.output_tokens
        if profile.ttft_ns:
            chat["gen_ai.server.time_to_first_token"] = profile.ttft_ns / 1e9
        reserved_chat = early.pop(_CHAT, None)  # the call sent its context
        spans.child(f"chat {model}", step_ctx, kind.CLIENT, model_start,
                    model_start + wall[_MODEL], chat,
                    context=None if reserved_chat is None else reserved_chat[0])
        tools_start = start + sum(wall[:_TOOLS])
        requested = early.pop(_TOOL, None)  # a call that sent requests with its context
        if requested is not None and (len(results) != 1 or results[0][0] in early):
            # Several calls (or none, or one with a child run's span): which one sent them
            # is not known, so they name the tools phase's span, the parent of every call's.
            tools_ctx = spans.child("tools", step_ctx, kind.INTERNAL, tools_start,
                                    tools_start + wall[_TOOLS], {"podium.tool_calls":
                                                                len(results)},
                                    context=requested[0])
            step_ctx, requested = tools_ctx, None
        for index, result in results:
            outcome = "ok" if result.ok else (result.error or "error")
            reserved = early.pop(index, None) or requested  # a child run's, or a request's
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": result.name,
                "gen_ai.tool.call.id": result.call_id,
                "gen_ai.tool.type": ("agent" if reserved is not None and reserved is not requested
                                     else "function"),
                "podium.tool.outcome": outcome,
                "podium.tool.attempts": result.attempts,
            }
            if not result.ok:
                attrs["error.type"] = outcome
            if reserved is None or reserved is requested:
                span_start, span_end = tools_start, tools_start + (result.wall_ns or wall[_TOOLS])
            else:  # it spans its child run, measured on the same clock
                span_start, span_end = reserved[1], end
            spans.child(f"execute_tool {result.name}", step_ctx, kind.INTERNAL, span_start,
                        span_end, attrs, None if result.ok else outcome,
                        context=None if reserved is None else reserved[0])
        for span, span_start in early.values():  # a call with no outcome (cannot happen)
            spans.child("execute_tool", step_ctx, kind.INTERNAL, span_start, end, {},
                        context=span)

    def run_finished(self, record: RunRecord) -> None:
        runs = self._runs
        if not runs:  # no sampled run being driven: the usual case
            return
        run = runs.pop(record.run_id, None)
        if run is None:  # not sampled
            return
        if self._open:  # a step cut short (cancelled, failed in its call): end its spans
            now = time.time_ns()
            for key in [k for k in self._open if k[0] == record.run_id]:
                step, step_start, early = self._open.pop(key)
                for index, (span, span_start) in early.items():
                    name = (f"chat {run.calls.agent.model.traced_model}" if index == _CHAT
                            else "execute_tool")
                    self._spans.child(name, step, self._kind.INTERNAL, span_start,
                                      now, {}, "cancelled", context=span)
                self._spans.child(f"step {key[1]}", run.context, self._kind.INTERNAL,
                                  step_start, now, {}, context=step)
        attrs: dict[str, Any] = {
            "podium.run.status": record.status,
            "podium.run.steps": record.steps,
            "gen_ai.usage.input_tokens": record.usage.input_tokens,
            "gen_ai.usage.output_tokens": record.usage.output_tokens,
        }
        error = None
        if record.status != "completed":
            error = record.reason or record.status
            attrs["error.type"] = error
        # Its last step's span ends as the step is heard of, after the record's end time
        # was taken: the run's span covers it (a child never ends after its parent).
        end = max(_ns(record.finished_at), run.last_end)
        self._spans.close_run(run, f"invoke_agent {record.agent}", end, attrs, error)


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
    tracer: RunTracer | None,
    headers: Mapping[str, str],
    metadata: Mapping[str, str],
    agent: str,
    route: str = "/v1/runs",
    mcp_meta: Mapping[str, Any] | None = None,
) -> Iterator[dict[str, str]]:
    """The metadata a run submitted through the gateway carries: the caller's W3C trace
    context, continued by a ``POST {route}`` server span when the gateway traces. The
    worker that drives the run (any process, via the queue) parents its run span there.

    ``mcp_meta`` is an MCP ``tools/call``'s ``params._meta``: a trace context there is
    the caller's (:func:`meta_carrier`), and the HTTP request's own, if it differs, is
    linked to the span."""
    carrier = meta_carrier(mcp_meta, headers)
    meta = dict(metadata)
    if tracer is None:
        for key in TRACE_KEYS:
            value = carrier.get(key)
            if value:
                meta.setdefault(key, value)
        yield meta
        return
    from opentelemetry.propagate import extract, inject

    from podium.observe.server_span import hold

    links = None
    if carrier is not headers and headers.get("traceparent"):
        transport = tracer._trace.get_current_span(extract(headers)).get_span_context()
        if transport.is_valid:
            links = [tracer._trace.Link(transport)]
    span = tracer.tracer.start_span(
        f"POST {route}", context=extract(carrier), kind=tracer._kind.SERVER,
        attributes={"http.request.method": "POST", "http.route": route,
                    "gen_ai.agent.name": agent},
        links=links,
    )
    inject(meta, context=tracer._trace.set_span_in_context(span))
    try:
        yield meta
    except BaseException as exc:
        status_cls, code = tracer._status
        span.set_status(status_cls(code.ERROR, type(exc).__name__))
        raise
    finally:
        if not hold(span):  # served through ServerSpans: it ends with the response's body
            span.end()
