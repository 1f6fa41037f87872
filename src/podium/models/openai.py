"""One OpenAI-compatible chat-completions endpoint: pooled connections, retries, a breaker.

Works with vLLM, SGLang, llama.cpp's ``llama-server``, Ollama and hosted
OpenAI-compatible APIs. The wire format lives in :mod:`podium.models.openai_wire`;
this module only moves bytes: one keep-alive ``aiohttp`` session per endpoint
with a bounded connection pool, retries on connection errors, 429 and 5xx
(``Retry-After`` honoured), a circuit breaker, and a timeout on every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import aiohttp
import msgspec
import yarl

from podium.errors import ConfigError, ModelError, ModelTimeoutError, ModelUnavailableError
from podium.models.base import Model, ModelRequest, ModelResponse, OutputMode, StreamDelta
from podium.models.openai_errors import BackendStalledError, http_error
from podium.models.openai_http import (
    OpenAPIDoc,
    drain_after_done,
    endpoint_url,
    read_capped,
    stale_connection,
    whole_reply,
)
from podium.models.openai_wire import (
    RequestEncoder,
    SSEDecoder,
    StreamAssembler,
    StreamTruncatedError,
    decode_completion,
)
from podium.models.resilience import CircuitBreaker, RetryPolicy, Timeouts, parse_retry_after
from podium.models.server_kinds import PROFILES, ResponseFormatMode, server_profile
from podium.observe.tracing import trace_headers

__all__ = ("HEALTH_PATHS", "OpenAIChatModel")

log = logging.getLogger(__name__)

#: Health-probe paths per server kind, relative to the server's root, tried in order (a
#: 404/405 moves on to the next); see :mod:`podium.models.server_kinds`. None of them
#: queues behind or interrupts a generation: llama-cpp-python's ``/v1/models`` waits for
#: (and cuts) the generation in progress, so an unknown server is asked ``/health``,
#: ``/openapi.json`` (llama-cpp-python answers it), ``/api/version`` (Ollama), and only
#: then ``/v1/models``.
HEALTH_PATHS: dict[str, tuple[str, ...]] = {
    "llama.cpp": PROFILES["llamacpp"].health_paths,
    **{kind: profile.health_paths for kind, profile in PROFILES.items()},
}

_thread_ns = time.thread_time_ns
_perf = time.perf_counter
_monotonic = time.monotonic
#: bytes of an error answer read (the message is cut there anyway): a 500 with a
#: gigabyte of HTML must not be held in memory
_MAX_ERROR_BODY = 64 * 1024


class OpenAIChatModel(Model):
    """A model served behind ``POST {base_url}/chat/completions``.

    ``stream=True`` makes :meth:`request` stream the reply too, which records
    time to first token and per-token arrival times for the workload profile
    at a small CPU cost; :meth:`stream` always streams. ``extra_body`` is sent
    with every request (per-request ``ModelSettings.extra_body`` is merged on
    top). Pass ``session`` to use your own ``aiohttp.ClientSession`` (it is
    not closed by :meth:`aclose`). ``server`` names the server software (a kind of
    :mod:`podium.models.server_kinds`: ``"vllm"``, ``"sglang"``, ``"llamacpp"``,
    ``"llama-cpp-python"``, ``"ollama"``, ``"tgi"``, ``"openai"``), which picks its health
    probe, how structured output is sent and the ``tool_choice`` forms used;
    ``health_paths`` sets the probe paths (relative to the server root) directly,
    ``response_format`` the structured-output form (``"json_schema"``,
    ``"json_object"``, ``"none"``). ``tool_choice``, ``max_tokens`` and ``temperature``
    are sent when a request's settings leave them unset.
    ``structured_output`` is how agents with an ``output_type`` ask this server:
    ``"native"`` (OpenAI's ``response_format`` with a JSON Schema: OpenAI, vLLM, SGLang,
    llama.cpp, Ollama) or ``"tool"`` (a final-answer tool, for servers without it).
    ``provider`` is the ``gen_ai.provider.name`` its traces carry: ``"openai"`` (the wire
    format, whoever serves it, as the GenAI conventions suggest) unless you name another
    (``"azure.ai.openai"``, ``"deepseek"``, ``"groq"``…).

    Example::

        model = OpenAIChatModel(
            "http://127.0.0.1:8080/v1", "qwen2.5-7b",
            extra_body={"cache_prompt": True},   # llama.cpp: reuse the KV cache
            stream=True,
        )
        async with model:
            reply = await model.request(ModelRequest(messages=[Message("user", "hi")]))
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        name: str | None = None,
        stream: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        max_connections: int = 256,
        include_usage: bool = True,
        session: aiohttp.ClientSession | None = None,
        seed: int | None = None,
        server: str | None = None,
        health_paths: Sequence[str] | None = None,
        structured_output: OutputMode = "native",
        provider: str = "openai",
        response_format: ResponseFormatMode | None = None,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        if structured_output not in ("native", "tool"):
            raise ConfigError("structured_output must be 'native' or 'tool'")
        if response_format not in (None, "json_schema", "json_object", "none"):
            raise ConfigError("response_format must be 'json_schema', 'json_object' or 'none'")
        self.profile = server_profile(server)
        self.kind = self.profile.kind or None
        if (response_format or self.profile.response_format) == "none":
            structured_output = "tool"  # no response_format at all: a final-answer tool
        self.structured_output = structured_output
        self.provider = provider
        base = base_url.rstrip("/")
        self.base_url = base
        self.model = model
        self.request_model = model
        self.name = name or f"{model}@{endpoint_url(base).authority}"
        self.streaming = stream
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or CircuitBreaker(name=self.name)
        self.max_connections = max_connections
        self._url = yarl.URL(base + "/chat/completions")
        root = base[:-3] if base.endswith("/v1") else base
        if health_paths is None:
            health_paths = self.profile.health_paths
        self._health_urls = [yarl.URL(root + "/" + p.lstrip("/")) for p in health_paths]
        #: Why the last health check failed (the URL and the error), None after a pass.
        self.health_error: str | None = None
        self._response_format_set = response_format is not None
        self._encoder = RequestEncoder(
            model,
            extra_body=dict(extra_body or {}),
            include_usage=include_usage,
            profile=self.profile,
            response_format=response_format,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        hdrs = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            hdrs["Authorization"] = f"Bearer {api_key}"
        hdrs.update(headers or {})
        self._headers = hdrs
        self._client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeouts.connect_s, sock_read=self.timeouts.read_s
        )
        # a completion's headers may take up to first_byte_s (a non-streamed call sends
        # them after the whole generation): aiohttp's sock_read would cut that wait at
        # read_s, so it is armed only once the headers are in (see _open)
        self._post_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeouts.connect_s, sock_read=None
        )
        self._session = session
        self._owns_session = session is None
        self._rng = random.Random(seed)
        # statuses raised at once instead of retried: a BackendPool sets 502/503 here,
        # since it fails such calls over to another backend rather than wait on this one
        self.failover_statuses: frozenset[int] = frozenset()
        self.calls = 0
        self.retries = 0
        #: ``time.monotonic()`` when a call last got something from the server (an answer's
        #: headers, a token): a pool tells a busy backend from a stopped one by it
        self.progress_at = 0.0
        #: calls in flight that are not streamed: they show no progress until they end
        self.unstreamed_calls = 0

    # --- connection --------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections,
                limit_per_host=self.max_connections,
                keepalive_timeout=60,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._client_timeout,
                skip_auto_headers=("User-Agent",),
            )
            self._session = session
            self._owns_session = True
        return session

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    async def _open(
        self, body: bytes, deadline: float, first_token: bool = False
    ) -> aiohttp.ClientResponse:
        """Send ``body`` until a 200 arrives; retry what is worth retrying; raise the rest.
        ``first_token``: a streamed call, whose headers come before its first token, so
        they wait at most ``first_token_s`` too."""
        loop = asyncio.get_running_loop()
        session = self._get_session()
        t = self.timeouts
        retry = 0
        stale_retried = False
        while True:
            self.breaker.check()
            error: ModelError
            retry_after: float | None = None
            first_byte_s = t.first_byte_s
            if first_token and t.first_token_s is not None:
                first_byte_s = min(first_byte_s, t.first_token_s)
            first_byte = loop.time() + first_byte_s
            try:
                async with asyncio.timeout_at(min(deadline, first_byte)):
                    resp = await session.post(
                        self._url, data=body, headers=trace_headers(self._headers, model=True),
                        timeout=self._post_timeout
                    )
                    if resp.status != 200:
                        try:
                            raw = await read_capped(resp, _MAX_ERROR_BODY)
                        finally:
                            resp.release()
            except aiohttp.ConnectionTimeoutError:
                error = ModelTimeoutError(f"{self.name}: connect timed out after {t.connect_s}s")
                self.breaker.failure()
            except aiohttp.SocketTimeoutError as exc:
                self.breaker.failure()
                raise BackendStalledError(f"{self.name}: read timed out after {t.read_s}s") from exc
            except aiohttp.ClientConnectionError as exc:
                if not stale_retried and stale_connection(exc):
                    # a pooled connection the server closed as the request went out (its
                    # keep-alive timer raced ours): the server is fine, send it again at
                    # once, once, at no cost to the retries or the breaker
                    stale_retried = True
                    self.breaker.abandon()  # a half-open breaker's probe goes again
                    continue
                error = ModelUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}")
                self.breaker.failure()
            except TimeoutError as exc:
                self.breaker.failure()
                # Which limit it was: the first byte's, or the call's total (timeout_s)
                if first_byte <= deadline and first_byte_s != t.first_byte_s:
                    raise self._no_first_token() from exc
                limit = (
                    f"first_byte_s={first_byte_s:g}"
                    if first_byte <= deadline
                    else f"the call's total of {t.total_s:g}s, retries included"
                )
                raise ModelTimeoutError(f"{self.name}: no response within {limit}") from exc
            except BaseException:
                self.breaker.abandon()
                raise
            else:
                status = resp.status
                self.progress_at = _monotonic()
                if status == 200:
                    self.breaker.success()
                    conn = resp.connection
                    proto = None if conn is None else conn.protocol
                    if proto is not None and t.read_s and not resp.content.is_eof():
                        # from here on each read of the body waits at most read_s (the
                        # payload's end drops the timer; a body already whole needs none)
                        proto.read_timeout = t.read_s
                        proto.start_timeout()
                    return resp
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                error = http_error(status, raw, retry_after, self._url, self.name)
                if status >= 500 and not error.invalid_request:
                    self.breaker.failure()
                else:
                    # a live server saying no (a 4xx, or a 500 whose body says the request
                    # is invalid): retrying cannot help and the endpoint is not failing
                    self.breaker.success()
                if (
                    status not in self.retry.statuses
                    or error.invalid_request
                    or status in self.failover_statuses
                ):
                    raise error
            delay = self.retry.delay(retry, self._rng, retry_after)
            if delay is None or loop.time() + delay >= deadline:
                if not isinstance(error, ModelUnavailableError | ModelTimeoutError):
                    raise error
                raise ModelUnavailableError(f"{error} (after {retry + 1} attempts)") from error
            retry += 1
            self.retries += 1
            await asyncio.sleep(delay)

    # --- calls -------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        t0 = _perf()
        c0 = _thread_ns()
        self.calls += 1
        streaming = self.streaming
        body = self._encoder.encode(request, stream=streaming)
        cpu = _thread_ns() - c0
        loop = asyncio.get_running_loop()
        sent = loop.time()
        deadline = sent + self.timeouts.total_s
        if not streaming:
            self.unstreamed_calls += 1
            try:
                resp = await self._open(body, deadline)
                out = await self._whole(resp, deadline, request.prompt_tokens)
            finally:
                self.unstreamed_calls -= 1
            out.cpu_ns += cpu
            return out
        resp = await self._open(body, deadline, first_token=True)
        if whole_reply(resp):
            out = await self._whole(resp, deadline, request.prompt_tokens)
            out.cpu_ns += cpu
            return out
        with self._reading_body(resp):
            async with asyncio.timeout_at(deadline):
                out, spent = await self._read_stream(resp, t0, request.prompt_tokens, sent)
                cpu += spent
        out.cpu_ns = cpu
        return out

    @contextlib.contextmanager
    def _reading_body(self, resp: aiohttp.ClientResponse) -> Iterator[None]:
        """Read ``resp``'s body: a cut connection or the deadline said as the call's
        errors, and the response released."""
        try:
            yield
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            raise StreamTruncatedError(
                f"{self.name}: connection lost in the reply body: {exc}", connection_lost=True
            ) from exc
        except TimeoutError as exc:
            raise ModelTimeoutError(f"{self.name}: reply not complete in time") from exc
        finally:
            resp.release()

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, t0: float, prompt_tokens: int, sent: float
    ) -> tuple[ModelResponse, int]:
        asm = StreamAssembler(backend=self.name)
        sse = SSEDecoder()
        cpu = 0
        lost = False
        loop = asyncio.get_running_loop()
        idle = self.timeouts.token_idle_s
        # the idle timer moves only when tokens came and at most every `slack` seconds
        # (rescheduling costs a timer handle); it may fire up to `slack` early
        slack = min(1.0, idle / 10)
        moved = loop.time()
        seen = 0
        first_by = self._first_token_by(sent)
        try:
            async with asyncio.timeout_at(
                moved + idle if first_by is None else min(moved + idle, first_by)
            ) as idle_timer:
                async for chunk in resp.content.iter_any():
                    c0 = _thread_ns()
                    now = _perf() - t0
                    for event in sse.feed(chunk):
                        asm.feed(event, now)
                    cpu += _thread_ns() - c0
                    if asm.done:
                        break  # a server may hold the stream open after [DONE]
                    if asm.tokens != seen:
                        t = loop.time()
                        self.progress_at = _monotonic()
                        if not seen or t - moved >= slack:
                            moved = t
                            idle_timer.reschedule(t + idle)
                        seen = asm.tokens
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            lost = True
        except TimeoutError as exc:
            if not seen and first_by is not None:
                raise self._no_first_token() from exc
            raise BackendStalledError(
                f"{self.name}: no token for {idle}s (the stream sent only keep-alives)"
            ) from exc
        if asm.done:
            await drain_after_done(resp)
        c0 = _thread_ns()
        if not asm.done:
            for event in sse.close():
                asm.feed(event, _perf() - t0)
        out = asm.finish(connection_lost=lost, prompt_tokens=prompt_tokens)
        return out, cpu + _thread_ns() - c0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        """Stream the reply; the last delta carries the whole :class:`ModelResponse`.

        Retries happen only before the first byte of the reply; once deltas
        have been yielded a broken stream raises
        :class:`~podium.models.openai_wire.StreamTruncatedError`.
        """
        t0 = _perf()
        c0 = _thread_ns()
        self.calls += 1
        body = self._encoder.encode(request, stream=True)
        cpu = _thread_ns() - c0
        loop = asyncio.get_running_loop()
        sent = loop.time()
        deadline = sent + self.timeouts.total_s
        resp = await self._open(body, deadline, first_token=True)
        if whole_reply(resp):  # a server (or a proxy) that does not stream
            whole = await self._whole(resp, deadline, request.prompt_tokens)
            whole.cpu_ns += cpu
            if whole.content:
                yield StreamDelta(content=whole.content)
            yield StreamDelta(response=whole)
            return
        try:
            asm = StreamAssembler(backend=self.name, deltas=True)
            sse = SSEDecoder()
            lost = False
            content = resp.content
            idle = self.timeouts.token_idle_s
            last_token = loop.time()
            first_by = self._first_token_by(sent)
            seen = 0
            while True:
                # each read is bounded by the session's sock_read timeout, by the time
                # left without a token (keep-alive comments are not progress), before the
                # first one by first_token_s, and by the call's total deadline
                bound = min(last_token + idle, deadline)
                if not seen and first_by is not None:
                    bound = min(bound, first_by)
                try:
                    async with asyncio.timeout_at(bound):
                        chunk = await content.readany()
                except aiohttp.SocketTimeoutError as exc:
                    raise BackendStalledError(f"{self.name}: no stream data in time") from exc
                except TimeoutError as exc:
                    # Which bound it was, not what the clock says now: uvloop's timers
                    # (whole milliseconds) may fire a little before the deadline.
                    if bound >= deadline:
                        raise ModelTimeoutError(
                            f"{self.name}: stream not complete in time"
                        ) from exc
                    if not seen and first_by is not None and bound >= first_by:
                        raise self._no_first_token() from exc
                    raise BackendStalledError(
                        f"{self.name}: no token for {idle}s (the stream sent only keep-alives)"
                    ) from exc
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                    lost = True
                    break
                if not chunk:
                    break
                c0 = _thread_ns()
                now = _perf() - t0
                deltas = [d for event in sse.feed(chunk) for d in asm.feed(event, now)]
                cpu += _thread_ns() - c0
                if asm.tokens != seen:
                    seen = asm.tokens
                    last_token = loop.time()
                    self.progress_at = _monotonic()
                for d in deltas:
                    yield d
                if asm.done:
                    await drain_after_done(resp)  # a server may hold the stream open after [DONE]
                    break
                if loop.time() > deadline:
                    raise ModelTimeoutError(f"{self.name}: stream not complete in time")
            c0 = _thread_ns()
            if not asm.done:
                for event in sse.close():
                    for d in asm.feed(event, _perf() - t0):
                        yield d
            final = asm.finish(connection_lost=lost, prompt_tokens=request.prompt_tokens)
            final.cpu_ns = cpu + _thread_ns() - c0
        finally:
            resp.release()
        yield StreamDelta(response=final)

    def _first_token_by(self, sent: float) -> float | None:
        limit = self.timeouts.first_token_s
        return None if limit is None else sent + limit

    def _no_first_token(self) -> ModelTimeoutError:
        return BackendStalledError(
            f"{self.name}: no first token within first_token_s="
            f"{self.timeouts.first_token_s:g} (the server took the call and made no progress)"
        )

    async def _whole(
        self, resp: aiohttp.ClientResponse, deadline: float, prompt_tokens: int
    ) -> ModelResponse:
        """The whole reply ``resp`` carries (one JSON completion), read by ``deadline``."""
        with self._reading_body(resp):
            async with asyncio.timeout_at(deadline):
                data = await resp.read()
        c0 = _thread_ns()
        out = decode_completion(data, self.name, prompt_tokens)
        out.cpu_ns = _thread_ns() - c0
        return out

    # --- health ------------------------------------------------------------

    async def health(self, timeout_s: float = 2.0) -> bool:
        """True if the server answers its health path with 200 (see :data:`HEALTH_PATHS`).

        By default ``/health``, ``/openapi.json``, ``/api/version``, then
        ``/v1/models`` (see :data:`HEALTH_PATHS`). llama.cpp answers 503 while it loads
        a model. False when the server refuses or answers an error; a probe that
        gets no answer in ``timeout_s`` raises :class:`ModelTimeoutError`
        instead, since a busy server is not a dead one (a pool decides).
        """
        session = self._get_session()
        for url in list(self._health_urls):
            try:
                async with asyncio.timeout(timeout_s):
                    resp = await session.get(url, headers=self._headers)
                    answer = await read_capped(resp, _MAX_ERROR_BODY)
                    resp.release()
            except TimeoutError as exc:
                raise ModelTimeoutError(
                    f"{self.name}: no answer from {url} within {timeout_s}s"
                ) from exc
            except aiohttp.ClientError as exc:
                self.health_error = f"GET {url}: {type(exc).__name__}: {exc}"
                return False
            if resp.status == 200:
                if url is not self._health_urls[0]:
                    self._health_urls = [url]  # remember the path that works
                if self.kind is None and url.path == "/openapi.json":
                    self._detect(answer)
                self.health_error = None
                return True
            self.health_error = f"GET {url}: HTTP {resp.status}"
            if resp.status not in (404, 405):
                return False
        return False

    def _detect(self, openapi: bytes) -> None:
        """An unnamed server whose ``/openapi.json`` says it is llama-cpp-python (asked
        once, by the probe that found that path) is sent what that server accepts from
        now on: ``json_object`` with the schema (it refuses ``json_schema`` with a 500)
        and a tool forced by name. A ``response_format`` set by hand stays."""
        try:
            doc = msgspec.json.decode(openapi, type=OpenAPIDoc)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if "llama.cpp python" in doc.info.title.lower():
            self.profile = PROFILES["llama-cpp-python"]
            self.kind = self.profile.kind
            self._encoder.profile = self.profile
            if not self._response_format_set:
                self._encoder.response_format = self.profile.response_format
            log.info("%s: llama-cpp-python (its /openapi.json says so): structured output "
                     "as json_object, tools forced by name", self.name)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.base_url!r}, {self.model!r})"
