"""The one error body every gateway error uses, and the exception that carries it.

Every 4xx/5xx answer is ``application/json``::

    {"error": {"type": "invalid_request", "message": "Expected `str`, got `int`",
               "field": "input"}}

``type`` is a stable code (below), ``message`` is for people, ``field`` names
the offending field (dotted path into the body, or the query parameter / header)
when there is one, and ``retry_after`` (seconds) comes with every 429 and 503.

=========================  ======  ===================================================
type                       status  when
=========================  ======  ===================================================
invalid_json               400     the body is not JSON
unauthorized               401     no API key, or an unknown one
forbidden                  403     a tenant's key on an operator-only endpoint (/metrics)
not_found                  404     no such run (for this tenant), agent or route
method_not_allowed         405     the route exists, the method does not
request_timeout            408     the body did not arrive within ``server.body_timeout_s``
conflict                   409     e.g. cancelling a run that already finished
payload_too_large          413     the body is over ``server.max_body_bytes``
unsupported_media_type     415     a body that is not ``application/json``
invalid_request            422     a field is missing, unknown, of the wrong type or range
idempotency_mismatch       422     an ``Idempotency-Key`` reused with a different request
rate_limited               429     the tenant's or the pool's token bucket is empty
overloaded                 429     the adaptive limit (CPU or loop lag) is reached
queue_full                 429     the pool's backlog would miss its latency target
run_waiting                409     (chat completions) the run waits for a human's decision
run_failed                 502     (chat completions) the agent's run did not complete
timeout                    504     (chat completions) the run outlived ``server.wait_timeout_s``
unavailable                503     the run store or queue is unreachable, or refuses writes (out
                                   of memory, a read-only replica: the message says which;
                                   with Retry-After)
internal                   500     a bug; the message says no more than that
=========================  ======  ===================================================
"""

from __future__ import annotations

import math
import re

import msgspec

__all__ = ("ApiError", "ErrorBody", "ErrorDetail", "error_from_validation")


class ErrorDetail(msgspec.Struct, omit_defaults=True):
    type: str
    message: str
    field: str | None = None
    retry_after: float | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class ApiError(Exception):
    """Raised anywhere in a handler; the app turns it into the error body and status."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        field: str | None = None,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.headers = dict(headers or {})
        if retry_after is not None:
            # Retry-After takes whole seconds; round up so a client never retries too early.
            self.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))

    def body(self) -> ErrorBody:
        retry = None if self.retry_after is None else round(self.retry_after, 3)
        return ErrorBody(ErrorDetail(self.type, self.message, self.field, retry))


_AT = re.compile(r"\s+-\s+at\s+`\$(?P<path>[^`]*)`$")
_UNKNOWN = re.compile(r"unknown field `(?P<name>[^`]+)`")
_MISSING = re.compile(r"missing required field `(?P<name>[^`]+)`")


def _dotted(path: str) -> str:
    """``.a[0].b`` → ``a[0].b``."""
    return path[1:] if path.startswith(".") else path


def error_from_validation(exc: msgspec.ValidationError) -> ApiError:
    """A 422 naming the field msgspec complained about (``$.a.b`` becomes ``a.b``)."""
    text = str(exc)
    path = ""
    match = _AT.search(text)
    if match:
        path = _dotted(match.group("path"))
        text = text[: match.start()]
    for pattern in (_UNKNOWN, _MISSING):
        named = pattern.search(text)
        if named:
            path = f"{path}.{named.group('name')}" if path else named.group("name")
            break
    return ApiError(422, "invalid_request", text, field=path or None)


def run_waiting(run_id: str) -> str:
    """Why a run has no answer yet: it waits for a human (what a client must do next)."""
    return (
        f"run {run_id} is waiting for a human's decision: decide its calls "
        f"(GET /v1/runs/{run_id}/approvals), then read its answer at GET /v1/runs/{run_id}"
    )


def run_still_going(run_id: str, waited_s: float | None = None) -> str:
    """Why a run has no answer yet: a wait for it timed out; it goes on."""
    within = "the wait timeout" if waited_s is None else f"{waited_s:g}s (wait_timeout_s)"
    return (
        f"run {run_id} did not finish within {within}; it goes on: "
        f"GET /v1/runs/{run_id} for its end"
    )

