"""MCP tools: a Model Context Protocol server's tools as Podium tools (official ``mcp`` SDK).

::

    docs = MCPServer.stdio("python", ["docs_server.py"], timeout=10, retries=1)
    search = MCPServer.http("http://127.0.0.1:8931/mcp", policy=EgressPolicy.loopback())
    agent = Agent("helper", model, tools=[*await docs.list_tools(), *await search.list_tools()])

Each MCP tool becomes a :class:`~podium.tools.Tool` under the same policies as any other
(timeout, retries, breaker, concurrency, result truncation, side-effect keys, and the
agent's injection screening of its results). The list is fetched once and cached; a
``notifications/tools/list_changed`` from the server drops the cache, so the next
:meth:`MCPServer.list_tools` sees the new list. One session per server per event loop is
shared by every run (calls are multiplexed on it); a session whose connection fails is
dropped and the next call reconnects, so a crashed stdio server is started again. A call
that fails because the connection did raises :class:`~podium.errors.RetryableToolError`,
so a tool with ``retries`` tries again on a fresh session. A server that answers, but
wrongly (a result of the wrong shape, an unknown content block, a JSON-RPC error, an HTTP
401), fails the call with :class:`MCPToolError`, not retried: the tool ran, the session
is fine. ``initialize`` is bounded by the tool timeout; one message by
``max_message_bytes`` (:mod:`~podium.tools.mcp_stdio`, :mod:`~podium.tools.mcp_http`);
a listing by :data:`MAX_TOOLS`, and two of its tools under one name are refused.

A traced run's ``tools/call`` carries its W3C trace context in ``params._meta``
(``traceparent``, ``tracestate``), as the OpenTelemetry semantic conventions for MCP say,
over stdio and HTTP alike: an instrumented server continues the run's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import keyword
import re
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import anyio

from podium.errors import MissingExtraError

try:
    from mcp import ClientSession, types
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ModuleNotFoundError as exc:  # an extra: the base install has no MCP SDK
    raise MissingExtraError("podium.tools.mcp (MCP tools)", "mcp", exc.name or "mcp") from None

import pydantic  # the MCP SDK's own dependency: there once the SDK imported

from podium.errors import PodiumError, RetryableToolError
from podium.models.base import ToolDefinition
from podium.observe.tracing import trace_meta
from podium.security.egress import EgressPolicy
from podium.tools.mcp_http import MAX_MESSAGE_BYTES, guarded_http_client
from podium.tools.mcp_stdio import StdioFault, bounded_stdio_client
from podium.tools.policy import BreakerPolicy
from podium.tools.tool import Tool, tool

__all__ = ("MCPServer", "MCPToolError")

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list[Any],
    "object": dict[str, Any],
}
_NAME = re.compile(r"[^A-Za-z0-9_-]")
# More would not fit a prompt anyway; a server that pages on for ever is cut off here.
MAX_TOOLS = 10_000


class MCPToolError(PodiumError):
    """The MCP tool answered with an error result (its text is the message)."""


class _Session:
    """One live MCP session, owned by a background task (the SDK's transports are context
    managers that must be entered and left in the same task)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.session: ClientSession | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None
        self.fault: StdioFault | None = None  # the stdio transport's account of its end
        # Cancelled by close(): an anyio scope, not task.cancel(), so the SDK's shielded
        # transport shutdown (stdin closed, TERM, KILL: no orphan) still runs to its end.
        self._scope = anyio.CancelScope()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{server.name}")

    async def _run(self) -> None:
        try:
            with self._scope:
                async with self.server._connect() as streams:
                    read, write = streams[0], streams[1]
                    if len(streams) > 2 and isinstance(streams[2], StdioFault):
                        self.fault = streams[2]
                    async with ClientSession(read, write, message_handler=self._on_message) as s:
                        # A server that never answers initialize would hold every later
                        # call (and aclose) for ever: bounded like one of its calls.
                        with anyio.fail_after(self.server.connect_timeout):
                            await s.initialize()
                        self.session = s
                        self.ready.set()
                        await self.stop.wait()
        except Exception as exc:  # a dead server or transport: the next call reconnects
            leaf = _leaf(exc)
            if isinstance(leaf, TimeoutError) and not self.ready.is_set():  # fail_after's
                leaf = TimeoutError(
                    f"no answer to initialize within {self.server.connect_timeout:g}s"
                )
            self.error = leaf
        finally:
            self.session = None
            self.stop.set()
            self.ready.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.server._tools = None
            self.server.list_changes += 1
            changed, self.server._changed = self.server._changed, asyncio.Event()
            changed.set()
        await asyncio.sleep(0)

    async def get(self) -> ClientSession:
        await self.ready.wait()
        if self.session is None:
            raise RetryableToolError(
                f"MCP server {self.server.name!r} is unavailable: {self.error or 'closed'}"
            )
        return self.session

    async def close(self) -> None:
        self.stop.set()
        if not self.ready.is_set():  # still starting: nothing waits on stop yet
            self._scope.cancel()
        with contextlib.suppress(Exception):
            await self.task


class MCPServer:
    """An MCP server whose tools Podium agents may call. Build with :meth:`stdio` or
    :meth:`http`; ``prefix`` is put before each tool name; ``allow`` limits the tools
    taken; the other options are the tools' policy (see :func:`~podium.tools.tool`)."""

    def __init__(
        self,
        connect: Callable[[], AbstractAsyncContextManager[Any]],
        *,
        name: str,
        prefix: str = "",
        allow: Sequence[str] | None = None,
        timeout: float | None = 30.0,
        retries: int = 1,
        breaker: BreakerPolicy | int | None = None,
        max_concurrency: int | None = None,
        side_effects: bool | None = None,
        max_result_tokens: int | None = None,
    ) -> None:
        self._connect = connect
        self.name = name
        self.prefix = prefix
        self.allow = None if allow is None else frozenset(allow)
        self._policy: dict[str, Any] = {
            "timeout": timeout,
            "retries": retries,
            "breaker": breaker,
            "max_concurrency": max_concurrency,
            "max_result_tokens": max_result_tokens,
        }
        self._side_effects = side_effects
        self._sessions: dict[asyncio.AbstractEventLoop, _Session] = {}
        self._dropped: set[_Session] = set()  # failed sessions still shutting their transport
        self.connect_timeout = timeout if timeout is not None else 30.0
        self._tools: list[Tool[..., Any]] | None = None
        self._changed = asyncio.Event()
        self.connects = 0
        self.calls = 0
        self.list_changes = 0

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        **options: Any,
    ) -> MCPServer:
        """A server started as a subprocess speaking MCP on its stdin/stdout; a line over
        ``max_message_bytes`` ends its session (:mod:`podium.tools.mcp_stdio`)."""
        params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        if sys.platform == "win32":  # no process groups there: the SDK's own transport
            return cls(lambda: stdio_client(params), name=name or command, **options)
        return cls(
            lambda: bounded_stdio_client(
                params, max_line_bytes=max_message_bytes, name=name or command
            ),
            name=name or command,
            **options,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        policy: EgressPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        **options: Any,
    ) -> MCPServer:
        """A server at a streamable-HTTP endpoint (sent ``headers``, e.g. its API key).

        Every connection to it passes ``policy`` (:mod:`podium.tools.mcp_http`): the URL
        now, raising :class:`~podium.security.EgressDenied`, and each resolved address at
        connect time. By default public addresses only, on any port; a server on this
        machine or a private network needs ``policy=EgressPolicy.loopback()`` or an
        ``EgressPolicy(allow_networks=...)`` that names its network. An answer over
        ``max_message_bytes`` fails its call."""
        guard = policy if policy is not None else EgressPolicy(allow_ports=None)
        guard.check_url(url)
        sent = dict(headers) if headers else None

        @contextlib.asynccontextmanager
        async def connect() -> AsyncIterator[Any]:
            # The SDK leaves a client it was given open: this one is ours to close.
            async with (
                guarded_http_client(
                    guard, headers=sent, max_message_bytes=max_message_bytes
                ) as client,
                streamable_http_client(
                    url, http_client=client, max_sse_event_size=max_message_bytes
                ) as streams,
            ):
                yield streams

        return cls(connect, name=name or url, **options)

    # -- sessions -----------------------------------------------------------------------------

    def _session(self) -> _Session:
        loop = asyncio.get_running_loop()
        held = self._sessions.get(loop)
        if held is None or held.stop.is_set():
            for old in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[old]
            held = self._sessions[loop] = _Session(self)
            self.connects += 1
            self._tools = None  # a new session may serve a different list
        return held

    def _drop(self, held: _Session) -> None:
        held.stop.set()
        if self._sessions.get(asyncio.get_running_loop()) is held:
            del self._sessions[asyncio.get_running_loop()]
        if not held.task.done():  # aclose waits for it: its subprocess must be gone by then
            self._dropped.add(held)
            held.task.add_done_callback(lambda _: self._dropped.discard(held))

    async def aclose(self) -> None:
        """Close this loop's session (the subprocess of a stdio server ends with it), and
        wait for sessions dropped after a failure to finish shutting down."""
        loop = asyncio.get_running_loop()
        held = self._sessions.pop(loop, None)
        closing = [s for s in self._dropped if s.task.get_loop() is loop]
        for s in [held, *closing] if held is not None else closing:
            await s.close()

    async def __aenter__(self) -> MCPServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- tools --------------------------------------------------------------------------------

    async def list_tools(self) -> list[Tool[..., Any]]:
        """The server's tools as Podium tools (cached until the server says they changed)."""
        held = self._session()
        if self._tools is not None:
            return self._tools
        session = await held.get()
        listed: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            if len(listed) > MAX_TOOLS:
                raise MCPToolError(f"MCP server {self.name!r} lists over {MAX_TOOLS} tools")
            cursor = getattr(page, "next_cursor", None)
            if not cursor:
                break
            if cursor in seen:  # a loop: the list would never end
                raise MCPToolError(f"MCP server {self.name!r} repeats tools/list cursor {cursor!r}")
            seen.add(cursor)
        tools = [self._tool(t) for t in listed if self.allow is None or t.name in self.allow]
        _refuse_collisions(self.name, tools)
        self._tools = tools
        return tools

    async def tools_changed(self) -> None:
        """Wait for the server's next tool-list change notification."""
        await self._changed.wait()

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call tool ``name``; its text (or structured) result, or :class:`MCPToolError`."""
        self.calls += 1
        held = self._session()
        session = await held.get()
        try:
            # A traced run's context goes in params._meta (the OpenTelemetry conventions for
            # MCP): the session is shared by every run, so it cannot go on the transport.
            meta = cast("types.RequestParamsMeta | None", trace_meta())  # an open TypedDict
            result = await session.call_tool(name, arguments, meta=meta)
        except (pydantic.ValidationError, RuntimeError) as exc:
            # The session is fine; the answer is not (wrong types, an unknown content
            # block, a result the output schema refuses). Not retried: the tool ran.
            raise MCPToolError(
                f"MCP server {self.name!r} answered {name!r} with an invalid result: "
                f"{_first_line(exc)}"
            ) from exc
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:  # a JSON-RPC error answer: it was heard
                raise MCPToolError(
                    f"MCP server {self.name!r} answered {name!r} with an error: "
                    f"{exc.message} (JSON-RPC error {exc.code})"
                ) from exc
            self._drop(held)
            raise RetryableToolError(
                f"MCP server {self.name!r} failed during {name!r}: {self._why(held, exc)}"
            ) from exc
        except Exception as exc:  # the connection failed (a crash mid-call): reconnect next
            self._drop(held)
            raise RetryableToolError(
                f"MCP server {self.name!r} failed during {name!r}: {self._why(held, exc)}"
            ) from exc
        return _result(self.name, name, result)

    def _why(self, held: _Session, exc: BaseException) -> str:
        """What a failed call says: the transport's own error when it has one (an HTTP
        status, an oversized message), more use than the SDK's 'Connection closed'."""
        fault = held.fault.error if held.fault is not None else None
        return str(fault or held.error or exc)

    def _tool(self, spec: types.Tool) -> Tool[..., Any]:
        schema: dict[str, Any] = dict(getattr(spec, "input_schema", None) or {})
        props: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        sig: list[inspect.Parameter] = []
        annotations: dict[str, Any] = {}
        for pname, prop in props.items():
            if not pname.isidentifier() or keyword.iskeyword(pname):
                continue  # cannot be a Python parameter; the server's default applies
            kind = _JSON_TYPES.get(str(prop.get("type")), Any) if isinstance(prop, dict) else Any
            if pname in required:
                sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY))
                annotations[pname] = kind
            else:
                sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=None))
                annotations[pname] = kind | None if kind is not Any else Any
        remote = spec.name

        async def call(**kwargs: Any) -> Any:
            args = {k: v for k, v in kwargs.items() if v is not None or k in required}
            return await self.call(remote, args)

        local = _NAME.sub("_", f"{self.prefix}{remote}")
        call.__name__ = call.__qualname__ = local
        call.__signature__ = inspect.Signature(sig)  # type: ignore[attr-defined]
        call.__annotations__ = annotations
        hints = spec.annotations
        side_effects = self._side_effects
        if side_effects is None:  # from the server's hints: read-only tools have none
            destructive = getattr(hints, "destructive_hint", None)
            read_only = getattr(hints, "read_only_hint", None)
            side_effects = destructive is True or read_only is False
        description = spec.description or remote
        made = tool(name=local, description=description, side_effects=side_effects, **self._policy)(
            call
        )
        # The model reads the server's own schema (descriptions, enums, nesting); the
        # argument struct validates the top level.
        schema.pop("title", None)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        made.parameters = schema
        made.definition = ToolDefinition(local, description, schema)
        return made


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the SDK's task groups (their own text says nothing)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, pydantic.ValidationError):  # its first error, not every union arm
        first = exc.errors()[0] if exc.errors() else None
        if first is not None:
            loc = first["loc"]
            if len(loc) > 2 and loc[0] == "content" and isinstance(loc[1], int):
                return (  # the union's arms each complain; what matters is which block
                    f"content[{loc[1]}] is not a text, image, audio, resource or "
                    "resource_link block"
                )
            where = ".".join(str(part) for part in loc)
            text = f"{where}: {first['msg']}" if where else first["msg"]
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _refuse_collisions(server: str, tools: Sequence[Tool[..., Any]]) -> None:
    """Two of a server's tools under one local name (listed twice, or alike once odd
    characters become ``_``): which one a call would reach is a guess, so neither is."""
    seen: dict[str, int] = {}
    for t in tools:
        seen[t.name] = seen.get(t.name, 0) + 1
    clashes = sorted(n for n, count in seen.items() if count > 1)
    if clashes:
        shown = ", ".join(map(repr, clashes[:5])) + (" ..." if len(clashes) > 5 else "")
        raise MCPToolError(f"MCP server {server!r} lists more than one tool named {shown}")


def _block(content: Any) -> str:
    """One content block as text for the model: binary data is named, never inlined."""
    if isinstance(content, types.TextContent):
        return content.text
    if isinstance(content, types.EmbeddedResource):
        inner = content.resource
        if isinstance(inner, types.TextResourceContents):
            return inner.text
        return f"[resource {inner.uri} ({inner.mime_type or 'binary'})]"
    if isinstance(content, types.ResourceLink):
        return f"[resource link {content.uri}]"
    kind = getattr(content, "type", type(content).__name__)
    mime = getattr(content, "mime_type", None)
    size = len(getattr(content, "data", "") or "") * 3 // 4  # base64
    return f"[{kind} {mime or ''} {size} bytes, not shown]".replace("  ", " ")


def _result(server: str, name: str, result: Any) -> Any:
    if not isinstance(result, types.CallToolResult):
        raise MCPToolError(
            f"MCP server {server!r} did not complete {name!r}: {type(result).__name__}"
        )
    if result.is_error:
        texts = [_block(c) for c in result.content]
        raise MCPToolError("; ".join(texts) or "the tool reported an error")
    has_text = any(isinstance(c, types.TextContent) for c in result.content)
    if not has_text and result.structured_content is not None:
        return result.structured_content
    return "\n".join(_block(c) for c in result.content)
