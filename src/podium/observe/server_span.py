"""The gateway's server spans last as long as the responses they serve.

A run submitted through the gateway is traced by a ``POST /v1/runs`` (or
``/v1/chat/completions``, ``/v1/responses``, ``/mcp``) server span, made where the
request's body has been read and the run is submitted (it is named for the agent, and
the run's own span is its child). The request is not over then: a ``wait: true`` or a
non-streaming chat completion waits for its run, and a streaming one sends the run's
events until it ends. So the span is *held*: :class:`ServerSpans`, an ASGI middleware
around the app, ends it when the response's last body message has been sent (or the
request ends without one: a client gone, an error), and records the response's status.
Outside the middleware (a handler called directly) a span ends where it is made.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ("ServerSpans", "hold")

#: The spans the request being served holds (None: no request served by the middleware).
_held: ContextVar[list[Any] | None] = ContextVar("podium_server_spans", default=None)


def hold(span: Any) -> bool:
    """Leave ``span`` to end with the response of the request being served: True, or
    False (no request is served through :class:`ServerSpans`: end it yourself)."""
    held = _held.get()
    if held is None:
        return False
    held.append(span)
    return True


def _end(held: list[Any], status: int) -> None:
    if not held:
        return
    from opentelemetry.trace import Status, StatusCode

    for span in held:
        if status:
            span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR, str(status)))
        span.end()
    held.clear()


class ServerSpans:
    """Ends the server spans a request's handler held (:func:`hold`) when its response's
    body ends: a streamed one at its last event, not at submission."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Any] = []
        status = 0

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                _end(held, status)

        token = _held.set(held)
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            _held.reset(token)
            _end(held, status or 500)  # no answer sent: the request failed
