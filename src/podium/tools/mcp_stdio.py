"""The stdio transport for MCP servers, with a bound on what one line may hold.

The SDK's ``stdio_client`` reads the server's stdout into one string until a newline: a
server that writes a 10 MB line, or bytes without a newline for ever, grows the worker's
memory without end. This transport reads at most ``max_line_bytes`` per message; past
that the session ends with :class:`MessageTooLarge` (the call fails naming the server,
the next call starts it again). It keeps the SDK's process handling: the server starts
in a session of its own, and shutdown (shielded, every wait bounded) closes its stdin,
waits, then TERM and KILL its whole process group, so it never outlives the session.

Lines that are not JSON-RPC (a server logging to stdout) are dropped with one warning per
session, as the SDK drops them (it logs a traceback for each).

The transport yields ``(read, write, fault)``: ``fault.error`` says what ended it when
the server did (set before the read stream closes, so a call failing on the closed
stream can name it).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.buffered import BufferedByteReceiveStream

from podium.errors import MissingExtraError

try:
    from mcp import types
    from mcp.client.stdio import StdioServerParameters, get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.message import SessionMessage
except ModuleNotFoundError as exc:  # an extra: the base install has no MCP SDK
    raise MissingExtraError("podium.tools.mcp (MCP tools)", "mcp", exc.name or "mcp") from None

__all__ = ("MessageTooLarge", "StdioFault", "bounded_stdio_client")

log = logging.getLogger("podium.tools.mcp")

_EXIT_GRACE_S = 2.0  # after stdin closes, as the SDK (and the MCP spec) give a server
_KILL_AFTER_S = 2.0  # SIGTERM to SIGKILL
_FLUSH_S = 0.5  # for the writer to send what it accepted


class MessageTooLarge(Exception):
    """The server wrote a message over the transport's size limit."""


class StdioFault:
    """What ended a stdio transport, when the server did (None: it was closed by us)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None


@asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters, *, max_line_bytes: int, name: str = ""
) -> AsyncIterator[tuple[anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
                         anyio.abc.ObjectSendStream[SessionMessage], StdioFault]]:
    """Start ``params``' server (``name`` in log lines); its JSON-RPC streams, each
    message at most ``max_line_bytes`` long."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=sys.stderr,
        cwd=params.cwd,
        start_new_session=True,  # its own group: shutdown reaches its children too
    )
    # No await from here to the task group: a cancellation there would leak the process.
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    fault = StdioFault()
    writer_done = anyio.Event()
    assert process.stdout is not None and process.stdin is not None
    stdout, stdin = process.stdout, process.stdin

    async def reader() -> None:
        lines = BufferedByteReceiveStream(stdout)
        warned = False
        async with to_session:
            while True:
                try:
                    line = await lines.receive_until(b"\n", max_line_bytes)
                except anyio.DelimiterNotFound:
                    fault.error = MessageTooLarge(
                        f"it wrote a message over {max_line_bytes} bytes"
                    )
                    return
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError,
                        anyio.BrokenResourceError):
                    with anyio.move_on_after(0.5):  # its exit status, when it exited
                        await process.wait()
                    code = process.returncode
                    fault.error = ConnectionError(
                        "it closed its stdout" if code is None else f"it exited (status {code})"
                    )
                    return
                try:
                    message = types.jsonrpc_message_adapter.validate_json(
                        line.rstrip(b"\r"), by_name=False
                    )
                except ValueError:
                    if not warned:  # a server logging to stdout would flood the log
                        warned = True
                        log.warning("MCP server %r wrote a line that is not JSON-RPC "
                                    "(dropped, as any more will be): %.120r",
                                    name or params.command, line)
                    continue
                try:
                    await to_session.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def writer() -> None:
        try:
            async with from_session:
                async for sent in from_session:
                    text = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the end, not a call hanging
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read.close()
        write.close()
        with anyio.move_on_after(_FLUSH_S):
            await writer_done.wait()
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stdin.aclose()
        # A server cut off mid-message is still writing it: no grace, it cannot exit.
        grace = 0 if isinstance(fault.error, MessageTooLarge) else _EXIT_GRACE_S
        with anyio.move_on_after(grace):
            # Polled, not wait(): on 3.11+ that also waits for pipe EOF, which a child
            # holding the pipe delays; no event tells the exit alone.
            while process.returncode is None:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        if process.returncode is None:
            await terminate_posix_process_tree(process, _KILL_AFTER_S)
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stdout.aclose()
        for stream in (read, write, to_session, from_session):
            await stream.aclose()
        # asyncio's subprocess transport stays open (and complains when collected after
        # the loop closed) until closed; nothing public reaches it (the SDK does the same).
        transport = getattr(getattr(process, "_process", None), "_transport", None)
        close = getattr(transport, "close", None)
        if callable(close):
            with suppress(PermissionError):
                close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read, write, fault
        finally:
            with anyio.CancelScope(shield=True):  # the process must go, cancelled or not
                await shutdown()
            tg.cancel_scope.cancel()
