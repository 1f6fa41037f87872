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
so a tool with ``retries`` tries again on a fresh session.

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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import msgspec
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from podium.errors import PodiumError, RetryableToolError
from podium.models.base import ToolDefinition
from podium.observe.tracing import trace_meta
from podium.security.egress import EgressPolicy
from podium.tools.mcp_http import guarded_http_client
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
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{server.name}")

    async def _run(self) -> None:
        try:
            async with self.server._connect() as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write, message_handler=self._on_message) as s:
                    await s.initialize()
                    self.session = s
                    self.ready.set()
                    await self.stop.wait()
        except Exception as exc:  # a dead server or transport: the next call reconnects
            self.error = _leaf(exc)
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
        **options: Any,
    ) -> MCPServer:
        """A server started as a subprocess speaking MCP on its stdin/stdout."""
        params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        return cls(lambda: stdio_client(params), name=name or command, **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        policy: EgressPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server at a streamable-HTTP endpoint (sent ``headers``, e.g. its API key).

        Every connection to it passes ``policy`` (:mod:`podium.tools.mcp_http`): the URL
        now, raising :class:`~podium.security.EgressDenied`, and each resolved address at
        connect time. By default public addresses only, on any port; a server on this
        machine or a private network needs ``policy=EgressPolicy.loopback()`` or an
        ``EgressPolicy(allow_networks=...)`` that names its network."""
        guard = policy if policy is not None else EgressPolicy(allow_ports=None)
        guard.check_url(url)
        sent = dict(headers) if headers else None

        @contextlib.asynccontextmanager
        async def connect() -> AsyncIterator[Any]:
            # The SDK leaves a client it was given open: this one is ours to close.
            async with (
                guarded_http_client(guard, headers=sent) as client,
                streamable_http_client(url, http_client=client) as streams,
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

    async def aclose(self) -> None:
        """Close this loop's session (the subprocess of a stdio server ends with it)."""
        held = self._sessions.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held.close()

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
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = getattr(page, "next_cursor", None)
            if not cursor:
                break
        tools = [self._tool(t) for t in listed if self.allow is None or t.name in self.allow]
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
        except Exception as exc:  # the connection failed (a crash mid-call): reconnect next
            self._drop(held)
            raise RetryableToolError(
                f"MCP server {self.name!r} failed during {name!r}: {exc}"
            ) from exc
        return _result(result)

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


def _result(result: Any) -> Any:
    if not isinstance(result, types.CallToolResult):
        raise MCPToolError(f"the server did not complete the call: {type(result).__name__}")
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if result.is_error:
        raise MCPToolError("; ".join(texts) or "the tool reported an error")
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return result.structured_content
    return msgspec.json.encode([c.model_dump(mode="json") for c in result.content]).decode()
