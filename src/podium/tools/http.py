"""HTTP tools on a pooled client behind an :class:`~podium.security.EgressPolicy`.

:class:`HttpClient` is the one way Podium's tools reach the network: an ``aiohttp``
session per event loop and policy (connections pooled and kept alive), a connector whose
resolver checks every resolved address against the policy, redirects followed by hand so
each hop is checked again, and caps on time and response size. A refusal raises
:class:`~podium.security.EgressDenied`, which the executor turns into an error observation
for the model like any other tool failure.

:func:`http_tool` declares a tool from a URL template::

    weather = http_tool(
        "weather",
        "https://api.example.com/v1/weather/{city}",
        description="Current weather in a city.",
        query={"units": "metric or imperial"},
        policy=EgressPolicy(allow_hosts={"api.example.com"}),
    )

and :func:`~podium.tools.openapi.openapi_tools` from an OpenAPI document.
"""

from __future__ import annotations

import asyncio
import inspect
import string
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from yarl import URL

from podium.errors import ToolDefinitionError
from podium.security.egress import EgressDenied, EgressPolicy
from podium.security.tenant_egress import current_egress
from podium.tools.tool import Tool, tool

if TYPE_CHECKING:
    # aiohttp (a third of a second to import) loads with a client's first session, not
    # with every agent that declares an HTTP tool.
    import aiohttp
    from aiohttp.abc import AbstractResolver

__all__ = ("HttpClient", "HttpError", "HttpResponse", "ResponseTooLarge", "http_tool")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class ResponseTooLarge(EgressDenied):
    """The response passed the policy's ``max_response_bytes``."""


class HttpError(Exception):
    """The server answered with an error status (the message carries status and reason)."""

    def __init__(self, status: int, reason: str, url: str) -> None:
        super().__init__(f"{url} answered HTTP {status} {reason}")
        self.status = status


class HttpResponse(msgspec.Struct, gc=False):
    """A response read in full (within the policy's size cap)."""

    url: str
    status: int
    reason: str
    content_type: str
    charset: str | None
    body: bytes
    redirects: int = 0

    @property
    def text(self) -> str:
        """The body as text, in its declared charset; UTF-8 where the server declared one
        that is no text encoding Python knows (``bogus``, ``rot13``, ``zlib``)."""
        try:
            return self.body.decode(self.charset or "utf-8", "replace")
        except LookupError:
            return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


async def _session_closer(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    # Suspended for the loop's lifetime; the loop's shutdown_asyncgens() (asyncio.run,
    # asyncio.Runner, uvloop) closes it, and with it the session, before the loop closes.
    try:
        yield
    finally:
        await session.close()


class _Held(msgspec.Struct, eq=False):  # hashed by identity
    session: aiohttp.ClientSession
    closer: AsyncIterator[None]


# Sessions by loop, held here (not by their client) so a client dropped mid-loop still has
# its session closed by the loop's shutdown rather than warned about by the collector.
_live: dict[asyncio.AbstractEventLoop, set[_Held]] = {}


def _hold(loop: asyncio.AbstractEventLoop, held: _Held) -> None:
    for old in [lp for lp in _live if lp.is_closed()]:
        del _live[old]
    _live.setdefault(loop, set()).add(held)


def _release(loop: asyncio.AbstractEventLoop, held: _Held) -> None:
    _live.get(loop, set()).discard(held)


def _close_later(sessions: dict[tuple[asyncio.AbstractEventLoop, EgressPolicy], _Held]) -> None:
    """A client was collected: close its sessions on their loops."""
    for (loop, _), held in sessions.items():
        if loop.is_closed() or held.session.closed:
            continue

        def close(held: _Held = held, loop: asyncio.AbstractEventLoop = loop) -> None:
            _release(loop, held)
            loop.create_task(held.closer.aclose())  # type: ignore[attr-defined]

        loop.call_soon_threadsafe(close)


class HttpClient:
    """A pooled HTTP client that enforces an egress policy on every hop.

    One client serves any number of event loops (each gets its own session, closed when
    the loop shuts down or on :meth:`aclose`). ``resolver`` replaces the system resolver
    under the policy check (a seam for tests and custom DNS).
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        resolver: AbstractResolver | None = None,
        max_connections: int = 100,
        user_agent: str = "podium",
    ) -> None:
        self.policy = policy or EgressPolicy()
        self._resolver = resolver
        self._max_connections = max_connections
        self._user_agent = user_agent
        # Sessions by loop and policy: a run under a tenant's policy gets a session whose
        # resolver checks that narrower policy (its own DNS cache and pooled connections).
        self._sessions: dict[tuple[asyncio.AbstractEventLoop, EgressPolicy], _Held] = {}
        self._narrowed: dict[EgressPolicy, EgressPolicy] = {}
        weakref.finalize(self, _close_later, self._sessions)
        self.requests = 0
        self.refused = 0

    def policy_now(self) -> EgressPolicy:
        """The policy a request sent now passes: the client's, narrowed by the tenant
        policy of the run whose tool is sending it (:mod:`podium.security.tenant_egress`)."""
        tenant = current_egress()
        if tenant is None:
            return self.policy
        policy = self._narrowed.get(tenant)
        if policy is None:
            policy = self._narrowed[tenant] = self.policy.narrowed(tenant)
        return policy

    async def _session(self, policy: EgressPolicy) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        held = self._sessions.get((loop, policy))
        if held is not None and not held.session.closed:
            return held.session
        import aiohttp

        from podium.security.resolver import GuardedResolver

        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            resolver=GuardedResolver(policy, self._resolver),
            keepalive_timeout=30,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,  # a proxy from the environment would bypass the address checks
            headers={"User-Agent": self._user_agent},
            auto_decompress=True,
        )
        closer = _session_closer(session)
        await closer.__anext__()
        held = self._sessions[loop, policy] = _Held(session, closer)
        _hold(loop, held)
        for old in [key for key in self._sessions if key[0].is_closed()]:
            del self._sessions[old]
        return session

    async def request(
        self,
        method: str,
        url: str | URL,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
    ) -> HttpResponse:
        """Send a request; raise :class:`EgressDenied` if any hop is refused."""
        self.requests += 1
        policy = self.policy_now()
        try:
            target = policy.check_url(url)
            if params:
                target = target.update_query(params)
            session = await self._session(policy)
            # The traced run's W3C traceparent goes on (one context-variable read when not;
            # imported here: podium.observe.tracing imports the engine, which imports tools).
            from podium.observe.tracing import trace_headers

            hdrs = trace_headers(dict(headers or {}))
            async with asyncio.timeout(policy.timeout_s):
                for hop in range(policy.max_redirects + 1):
                    async with session.request(
                        method, target, headers=hdrs, json=json, allow_redirects=False
                    ) as resp:
                        location = resp.headers.get("Location")
                        if resp.status in _REDIRECTS and location:
                            nxt = policy.check_url(target.join(URL(location)))
                            if nxt.origin() != target.origin():
                                # None of the caller's headers go to another origin: they
                                # carry its credentials, by any name (Authorization,
                                # X-Api-Key, ...). The trace context goes on.
                                hdrs = trace_headers({})
                            if resp.status == 303 or (
                                resp.status in (301, 302) and method != "GET"
                            ):
                                method, json = "GET", None
                            target = nxt
                            continue
                        body = await _read_capped(resp, policy.max_response_bytes)
                        return HttpResponse(
                            str(target),
                            resp.status,
                            resp.reason or "",
                            resp.content_type,
                            resp.charset,
                            body,
                            hop,
                        )
            raise EgressDenied(f"more than {policy.max_redirects} redirects from {url}")
        except TimeoutError as exc:  # (the tool's own timeout is the executor's, not this)
            raise TimeoutError(
                f"request to {url} timed out after {policy.timeout_s}s (the egress policy's "
                "timeout_s)"
            ) from exc
        except EgressDenied:
            self.refused += 1
            raise

    async def get(self, url: str | URL, **kwargs: Any) -> HttpResponse:
        return await self.request("GET", url, **kwargs)

    async def aclose(self) -> None:
        """Close this loop's sessions (others close with their loops)."""
        loop = asyncio.get_running_loop()
        for key in [key for key in self._sessions if key[0] is loop]:
            held = self._sessions.pop(key)
            _release(loop, held)
            await held.closer.aclose()  # type: ignore[attr-defined]


async def _read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise ResponseTooLarge(
            f"response from {resp.url} is {declared} bytes, over the limit of {limit}"
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"response from {resp.url} passed the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_shared: dict[EgressPolicy, HttpClient] = {}


def shared_client(policy: EgressPolicy) -> HttpClient:
    """The process's client for ``policy`` (tools with equal policies share a pool)."""
    client = _shared.get(policy)
    if client is None:
        client = _shared[policy] = HttpClient(policy)
    return client


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decode_body(resp: HttpResponse) -> Any:
    """JSON bodies as values, everything else as text."""
    if resp.content_type.endswith("json"):
        try:
            return resp.json()
        except msgspec.DecodeError:
            pass
    return resp.text


def http_tool(
    name: str,
    url: str,
    *,
    method: str = "GET",
    description: str = "",
    params: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    body: Mapping[str, str] | None = None,
    types: Mapping[str, Any] | None = None,
    required: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    policy: EgressPolicy | None = None,
    client: HttpClient | None = None,
    timeout: float | None = None,
    retries: int = 0,
    side_effects: bool | None = None,
    max_result_tokens: int | None = None,
) -> Tool[..., Any]:
    """A tool that sends one HTTP request built from its arguments.

    - ``url``: a template; each ``{name}`` is a required argument, percent-encoded into it.
    - ``params``: descriptions of the template's arguments.
    - ``query`` / ``body``: optional arguments (name → description) sent as query
      parameters / JSON body fields when given.
    - ``types``: argument types other than ``str`` (``{"limit": int}``).
    - ``required``: query/body arguments the call cannot go without.
    - ``policy`` / ``client``: where it may go (the default policy allows public hosts on
      80/443 only); tools with equal policies share one pooled client.

    The result is the decoded JSON body, or the text; an error status, a refused hop, a
    too-large or too-slow response becomes an error observation for the model.
    """
    http = client or shared_client(policy or EgressPolicy())
    path_names = [f for _, f, _, _ in string.Formatter().parse(url) if f]
    if any(not n.isidentifier() for n in path_names):
        raise ToolDefinitionError(f"tool {name!r}: URL placeholders must be plain names: {url}")
    query = dict(query or {})
    body = dict(body or {})
    kinds = dict(types or {})
    described = {**(params or {}), **query, **body}
    sig: list[inspect.Parameter] = []
    annotations: dict[str, Any] = {}
    for pname in dict.fromkeys(path_names):
        sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY))
        annotations[pname] = kinds.get(pname, str)
    for pname in (*query, *body):
        if pname in annotations:
            raise ToolDefinitionError(f"tool {name!r}: argument {pname!r} declared twice")
        if pname in required:
            sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY))
            annotations[pname] = kinds.get(pname, str)
        else:
            sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=None))
            annotations[pname] = kinds.get(pname, str) | None
    verb = method.upper()
    fixed_headers = dict(headers or {})

    async def call(**kwargs: Any) -> Any:
        filled = {n: urllib.parse.quote(str(kwargs[n]), safe="") for n in path_names}
        target = url.format(**filled)
        q = {n: _query_value(kwargs[n]) for n in query if kwargs.get(n) is not None}
        payload = {n: kwargs[n] for n in body if kwargs.get(n) is not None} if body else None
        resp = await http.request(verb, target, params=q, headers=fixed_headers, json=payload)
        if resp.status >= 400:
            raise HttpError(resp.status, resp.reason, resp.url)
        return decode_body(resp)

    arg_doc = "".join(f"\n    {n}: {d}" for n, d in described.items())
    call.__name__ = call.__qualname__ = name
    call.__doc__ = (description or f"{verb} {url}") + (f"\n\nArgs:{arg_doc}" if arg_doc else "")
    call.__signature__ = inspect.Signature(sig)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    return tool(
        name=name,
        timeout=timeout if timeout is not None else http.policy.timeout_s + 1.0,
        retries=retries,
        side_effects=verb not in ("GET", "HEAD") if side_effects is None else side_effects,
        max_result_tokens=max_result_tokens,
    )(call)
