"""Slow and hostile clients, handled where the bytes arrive: uvicorn's HTTP protocol, guarded.

uvicorn reads a request head for as long as the client cares to send it, of
any size, on as many connections as the process has file descriptors: a few
thousand slowloris connections starve everyone else. This subclass of its
httptools protocol adds, per connection:

- a **head timeout**: a request head (request line and headers) must arrive
  whole within ``header_timeout_s`` of its first byte (or of the connection's
  start); otherwise ``408`` and the connection is closed;
- a **head size limit**: more than ``max_header_bytes`` of head, or more than
  ``max_headers`` header lines, is ``431`` and the connection is closed;
- a **write timeout**: a client that reads nothing while the socket's buffers are full
  (an event stream's reader that stopped) is disconnected after ``write_timeout_s``
  without progress (a slow reader that takes some is not); its response, held in
  memory meanwhile, goes with it;
- a **connection cap**: past ``max_connections`` open connections a new one
  gets a ready-made ``503`` with ``Retry-After`` at once and is closed. Below
  the operator's cap, the process's file-descriptor limit is a cap too: there,
  room is made by closing the connection that has waited longest for its
  request head (the slowest client) before refusing anyone, so a flood of idle
  connections cannot lock out real requests.

Bodies are bounded by the app (``server.body_timeout_s``, ``max_body_bytes``).
Use it as uvicorn's ``http`` class::

    uvicorn.Config(app, http=guarded_protocol(ConnectionLimits(max_connections=5000)))
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import resource
import struct
import termios
import time
from typing import Any, ClassVar

import httptools
import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ("ConnectionLimits", "GuardedHttpToolsProtocol", "fd_headroom", "guarded_protocol")

#: The ioctl that reads a socket's unsent bytes (SIOCOUTQ is TIOCOUTQ on Linux).
_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)
#: File descriptors kept free for the process's own needs (store, model clients, logs).
_FD_RESERVE = 64
#: How long a refused or rejected connection is kept open to read (and drop) what the
#: client still sends, so that closing it does not reset the connection before the
#: client has read the answer.
_LINGER_S = 1.0


class ConnectionLimits(msgspec.Struct, frozen=True, kw_only=True):
    header_timeout_s: float = 10.0
    write_timeout_s: float = 60.0
    max_header_bytes: int = 16384
    max_headers: int = 100
    max_connections: int = 10000


def fd_headroom() -> int:
    """How many connections the file-descriptor limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, soft - max(_FD_RESERVE, soft // 16))


def _canned(status: bytes, body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status, b"content-type: application/json", *extra]
    head += [b"connection: close", b"content-length: %d" % len(body)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _error(type_: str, message: str, **extra: object) -> bytes:
    return msgspec.json.encode({"error": {"type": type_, "message": message, **extra}})


_REFUSED = _canned(
    b"503 Service Unavailable",
    _error("unavailable", "too many connections; retry later", retry_after=1),
    b"retry-after: 1",
)
_TOO_LARGE = _canned(
    b"431 Request Header Fields Too Large",
    _error("headers_too_large", "the request head is over the server's limit"),
)
_TIMEOUT = _canned(
    b"408 Request Timeout",
    _error("request_timeout", "the request head did not arrive in time"),
)


class _HeadTooLarge(Exception):
    pass


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head timeout, head limits and a connection cap."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    fd_cap: ClassVar[int] = 1 << 30
    #: Refused connections still open (they hold descriptors but are not the server's).
    _lingering: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._awaiting_head = True
        self._head_since = time.monotonic()
        self._head_bytes = 0  # raw bytes received since the head began
        self._head_parsed = 0  # bytes of request line and headers parsed
        self._header_count = 0
        self._refused = False  # refused at the cap: never registered with the server
        self._discarding = False  # answered and closing: what still arrives is dropped
        self._lingers = False  # counted in _lingering until the connection is lost
        self._stall_timer: asyncio.TimerHandle | None = None  # armed while writing is paused
        self._unsent = 0  # the write buffer's size when the stall timer was armed

    # -- connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        n = len(self.connections)
        if n >= self.limits.max_connections or (n >= self.fd_cap and not self._evict_slowest()):
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._arm_head_timer()

    def _evict_slowest(self) -> bool:
        """Close the connection that has waited longest for its request head, if any."""
        slowest: GuardedHttpToolsProtocol | None = None
        for conn in self.connections:
            if (
                isinstance(conn, GuardedHttpToolsProtocol)
                and conn._awaiting_head
                and not conn.transport.is_closing()
                and (slowest is None or conn._head_since < slowest._head_since)
            ):
                slowest = conn
        if slowest is None:
            return False
        # Closed now, without lingering: its descriptor is what the new connection needs.
        # Idle between requests, it is closed quietly (ordinary keep-alive behaviour: a
        # 408 would be read as the answer to a request the client sends meanwhile).
        if slowest._head_bytes and not slowest._discarding:
            slowest.transport.write(_TIMEOUT)  # it is sending a head, too slowly
        slowest._cancel_head_timer()
        slowest._discarding = True
        slowest.transport.close()
        self.connections.discard(slowest)
        return True

    def _refuse(self, transport: asyncio.Transport) -> None:
        self._refused = self._discarding = True
        self.transport = transport
        transport.write(_REFUSED)
        held = len(self.connections) + GuardedHttpToolsProtocol._lingering
        if held >= self.fd_cap:  # no descriptors to spare for lingering
            transport.close()
            return
        GuardedHttpToolsProtocol._lingering += 1
        self._lingers = True
        self.loop.call_later(_LINGER_S, transport.close)

    def pause_writing(self) -> None:
        """The client's socket is full (it reads slower than we write, or not at all):
        the response waits; past ``write_timeout_s`` without a byte read, it is closed."""
        super().pause_writing()
        if self._stall_timer is None:
            self._arm_stall_timer()

    def _arm_stall_timer(self) -> None:
        # What is still to send now: while writing is paused nothing is added to it, so
        # less of it at the timer means the client read some (slow, not stuck).
        self._unsent = self._unsent_bytes()
        self._stall_timer = self.loop.call_later(self.limits.write_timeout_s, self._stalled)

    def _unsent_bytes(self) -> int:
        """Bytes not yet taken by the client: the transport's buffer, and (Linux) the
        socket's send queue in the kernel, which a slow reader drains while the
        transport's buffer waits for the socket to be writable again."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None and _OUTQ is not None:
            with contextlib.suppress(OSError, ValueError):
                queued = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
                unsent += struct.unpack("i", queued)[0]
        return unsent

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_stall_timer()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        self._stall_timer = None
        if self.transport.is_closing():
            return
        if self._unsent_bytes() < self._unsent:
            self._arm_stall_timer()  # it read some meanwhile: a slow reader, not a stuck one
            return
        self.logger.info(
            "closing a connection whose client read nothing for %gs (write_timeout_s)",
            self.limits.write_timeout_s,
        )
        self.transport.abort()  # what it holds unsent goes too (close would wait on it)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_stall_timer()
        self._cancel_head_timer()
        if self._lingers:
            self._lingers = False
            GuardedHttpToolsProtocol._lingering -= 1
        if self._refused:
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            if self._refused and b"\r\n\r\n" in data:  # its request is in: it has our answer
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        if self._awaiting_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._close_with(_TOO_LARGE)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._awaiting_head and self._head_bytes > self.limits.max_header_bytes:
            self._close_with(_TOO_LARGE)

    # -- parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head = True
        self._head_parsed = self._header_count = 0
        if self._head_timer is None:  # a new request on a kept-alive connection
            self._head_since = time.monotonic()
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._head_parsed += len(url)
        if self._head_parsed > self.limits.max_header_bytes:
            raise _HeadTooLarge
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_parsed += len(name) + len(value) + 4
        if (
            self._header_count > self.limits.max_headers
            or self._head_parsed > self.limits.max_header_bytes
        ):
            raise _HeadTooLarge
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():
            # Idle until the next head: as evictable as a connection that never sent one.
            self._awaiting_head, self._head_bytes = True, 0
            self._head_since = time.monotonic()

    # -- the head timer -----------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        # Not while an earlier request's response is still going out (a pipelined head
        # may wait behind a long stream): only a connection that waits for a head alone.
        cycle = self.cycle
        if self._awaiting_head and (cycle is None or cycle.response_complete):
            self._close_with(_TIMEOUT)

    def _close_with(self, response: bytes, *, linger: bool = True) -> None:
        """Answer ``response`` and close. With ``linger``, the rest of what the client
        sends is read and dropped for a moment first: closing with unread data would
        reset the connection, and the client might lose the answer before reading it."""
        self._cancel_head_timer()
        if self.transport.is_closing() or self._discarding:
            return
        self._discarding = True
        self.transport.write(response)
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(_LINGER_S, self.transport.close)
        else:
            self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` setting, with ``limits`` and the fd cap."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"limits": limits, "fd_cap": fd_headroom()},
    )
