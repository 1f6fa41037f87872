"""Every request body bounded by ``server.max_body_bytes``, on every route, as it arrives.

Routes that read a JSON body stop at the limit themselves (``read_body``); this
middleware holds the bound for the rest, and for a client that lies:

- a ``Content-Length`` over the limit is answered ``413`` before any of the body
  is read, whatever the route (one that never reads a body included);
- a body that passes the limit while it arrives (chunked, with no length, or
  longer than the length it declared, as an HTTP/2 proxy may pass it) fails the
  read that passes it with ``413``: no reader is ever handed more than the limit.
  Once the response has begun (an event stream whose client keeps sending), the
  read says the client is gone instead, which ends the response.

A body a route does not read is discarded by the server as it arrives, never
buffered. Example::

    app = BodyLimit(app, max_bytes=1 << 20)
"""

from __future__ import annotations

import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podium.gateway.errors import ApiError

__all__ = ("BodyLimit", "body_too_large")

_encode = msgspec.json.Encoder().encode
#: More digits than any length under 2**63: int() of a longer header is not attempted.
_MAX_LENGTH_DIGITS = 19


def body_too_large(limit: int) -> ApiError:
    """The 413 of a body over ``limit`` bytes."""
    return ApiError(413, "payload_too_large", f"the body is over the limit of {limit} bytes")


def _declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length`` as a number (a huge one as ``2**63``), or None."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.strip()
            if not (text.isascii() and text.isdigit()):
                return None  # the server refuses a malformed length before the app sees it
            digits = text.lstrip(b"0") or b"0"
            return 2**63 if len(digits) > _MAX_LENGTH_DIGITS else int(digits)
    return None


class BodyLimit:
    """An ASGI middleware refusing request bodies over ``max_bytes`` with a 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(send, body_too_large(limit))
            return
        received = 0
        responding = False

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if responding:  # too late for a 413: the client is cut off instead
                        return {"type": "http.disconnect"}
                    raise body_too_large(limit)
            return message

        async def noting_send(message: Message) -> None:
            nonlocal responding
            if message["type"] == "http.response.start":
                responding = True
            await send(message)

        await self.app(scope, bounded_receive, noting_send)

    @staticmethod
    async def _refuse(send: Send, error: ApiError) -> None:
        body = _encode(error.body())
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
