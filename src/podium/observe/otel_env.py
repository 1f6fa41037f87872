"""The OpenTelemetry SDK Podium installs from the standard ``OTEL_*`` variables.

When tracing is configured and the application installed no tracer provider, serving
processes install one (:func:`install_provider`), following:

- ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default), ``console``, ``none``, or a comma list;
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``: ``http/protobuf``,
  the only one Podium's exporter speaks (``grpc`` and ``http/json`` are refused);
- ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``_HEADERS``, ``_TIMEOUT``, ``_COMPRESSION``,
  ``_CERTIFICATE`` and ``OTEL_BSP_*``: read by the SDK's exporter and batch processor;
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``: the resource (``service.name``
  ``podium`` when neither names one);
- ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``: the SDK's samplers; unset, Podium's
  rate-limited one (:func:`~podium.observe.tracing.default_sampler`).

Where the SDK would log a line and carry on doing something else (send HTTP to a gRPC
port, trace every run for a sampler it does not know), :func:`check_tracing_env` raises a
:class:`~podium.errors.ConfigError` naming the variable: ``podium serve`` and ``podium
worker`` call it before they start, so the mistake is one line, not a traceback.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from podium.errors import ConfigError

__all__ = ("check_tracing_env", "exporter_names", "install_provider")

_EXPORTERS = ("otlp", "console")
_SAMPLERS = (
    "always_on", "always_off", "traceidratio",
    "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
)
_INSTALL = "pip install 'podium[otel]'"


def tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces (a traces exporter other
    than ``none``, or, with ``OTEL_TRACES_EXPORTER`` unset, an OTLP endpoint), or
    ``PODIUM_TRACING=1``; never with ``OTEL_SDK_DISABLED=true``."""
    e = os.environ if env is None else env
    if e.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if e.get("PODIUM_TRACING", "") in ("1", "true"):
        return True
    exporter = e.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:  # "none": no traces, whatever endpoint is set (for metrics or logs, say)
        return any(name.strip() not in ("", "none") for name in exporter.split(","))
    return bool(e.get("OTEL_EXPORTER_OTLP_ENDPOINT") or e.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def default_sampler(env: Mapping[str, str] | None = None) -> Any:
    """Podium's default sampler when ``OTEL_TRACES_SAMPLER`` is unset: parent-based, root
    runs up to ``PODIUM_TRACES_PER_SECOND`` a second (default 1); None (the SDK reads the
    variables itself) when it is set. A bad rate is a :class:`~podium.errors.ConfigError`."""
    e = os.environ if env is None else env
    if e.get("OTEL_TRACES_SAMPLER"):
        return None
    from podium.observe.sampling import DEFAULT_TRACES_PER_SECOND, RateLimitedSampler

    raw = e.get("PODIUM_TRACES_PER_SECOND", "")
    try:
        rate = float(raw) if raw else DEFAULT_TRACES_PER_SECOND
        return RateLimitedSampler(rate)
    except ValueError:
        raise ConfigError(f"PODIUM_TRACES_PER_SECOND must be a number >= 0, not {raw!r}") from None


def exporter_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` when unset; none for
    ``none``); one Podium cannot build is a :class:`ConfigError`."""
    e = os.environ if env is None else env
    raw = e.get("OTEL_TRACES_EXPORTER", "").strip() or "otlp"
    names = [n.strip().lower() for n in raw.split(",") if n.strip().lower() not in ("", "none")]
    for name in names:
        if name not in _EXPORTERS:
            raise ConfigError(f"OTEL_TRACES_EXPORTER={raw!r}: Podium exports traces with "
                              f"'otlp' (OTLP over HTTP) or 'console', not {name!r}")
    return list(dict.fromkeys(names))


def check_tracing_env(env: Mapping[str, str] | None = None) -> None:
    """Refuse, with one line, ``OTEL_*`` settings Podium would not follow. Nothing to check
    (and nothing imported) when tracing is not configured; the exporter and sampler are not
    checked when the application installed its own tracer provider."""
    e = os.environ if env is None else env
    _check_podium_tracing(e)
    if not tracing_configured(e):
        return
    if not _installed("opentelemetry.sdk"):
        raise ConfigError(f"OTEL_* variables ask for traces but the OpenTelemetry SDK is not "
                          f"installed: {_INSTALL}")
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # the application's provider: its exporters and sampler are its own
    names = exporter_names(e)
    if "otlp" in names:
        _check_protocol(e)
        if not _installed("opentelemetry.exporter.otlp.proto.http"):
            raise ConfigError(f"OTEL_* variables ask for OTLP traces but the exporter "
                              f"(opentelemetry-exporter-otlp-proto-http) is not installed: "
                              f"{_INSTALL}")
    _check_sampler(e)
    default_sampler(e)  # PODIUM_TRACES_PER_SECOND, when it is the sampler


#: What ``PODIUM_TRACING`` may be, exactly as :func:`~podium.observe.tracing.tracing_configured`
#: reads it: ``1``/``true`` on; unset, empty, ``0``/``false`` off (then ``OTEL_*`` decide).
_PODIUM_TRACING = ("", "0", "false", "1", "true")


def _check_podium_tracing(e: Mapping[str, str]) -> None:
    """Anything else (``maybe``, ``yes``, ``TRUE``) was read as off without a word, so an
    operator who meant to turn tracing on got no traces and no reason."""
    raw = e.get("PODIUM_TRACING")
    if raw is not None and raw not in _PODIUM_TRACING:
        raise ConfigError(f"PODIUM_TRACING={raw!r}: use 1 or true to trace runs (0, false or "
                          "unset: only when OTEL_* variables ask for traces)")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _check_protocol(e: Mapping[str, str]) -> None:
    key = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if not e.get(key, "").strip():
        key = "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = e.get(key, "").strip().lower()
    if protocol and protocol != "http/protobuf":
        raise ConfigError(
            f"{key}={protocol!r}: Podium sends OTLP over HTTP (http/protobuf) only; point "
            "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP receiver (port 4318, "
            f"not gRPC's 4317) and set {key}=http/protobuf or leave it unset"
        )


def _check_sampler(e: Mapping[str, str]) -> None:
    name = e.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return
    if name not in _SAMPLERS:
        raise ConfigError(f"OTEL_TRACES_SAMPLER={name!r} is not a sampler the SDK knows "
                          f"(it would trace every run): use one of {', '.join(_SAMPLERS)}")
    raw = e.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if name.endswith("traceidratio") and raw:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={raw!r}: {name} takes a ratio from 0 "
                              "to 1 (0.01: one run in a hundred)")


def install_provider() -> Any:
    """Install (globally) and return an SDK tracer provider configured by ``OTEL_*``, after
    :func:`check_tracing_env`."""
    check_tracing_env()
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter


    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "podium"}))
    sdk = TracerProvider(sampler=default_sampler(), resource=resource)
    for name in exporter_names():
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporter = ConsoleSpanExporter()
        sdk.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(sdk)
    return sdk
