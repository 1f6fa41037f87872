"""The OpenAI chat-completions wire protocol, sans I/O.

Typed msgspec structs for the request, the reply and the streamed chunks;
:class:`RequestEncoder` turns a :class:`ModelRequest` into body bytes,
:func:`decode_completion` turns a reply body into a :class:`ModelResponse`,
and :class:`SSEDecoder` + :class:`StreamAssembler` turn a stream of bytes into
deltas and, at the end, one response. Nothing here touches a socket, so every
server's format (vLLM, SGLang, llama.cpp, Ollama, OpenAI) is tested by feeding
recorded bytes.

The reply structs only declare the fields Podium reads; msgspec skips the rest
without building objects for them, which is most of why decoding is cheap.
"""

from __future__ import annotations

from typing import Any

import msgspec

from podium.errors import ConfigError, ModelReplyError
from podium.messages import Message, ToolCall, Usage
from podium.models.base import (
    ModelRequest,
    ModelResponse,
    OutputSchema,
    StreamDelta,
    ToolDefinition,
)
from podium.models.openai_errors import http_error
from podium.models.server_kinds import (
    DEFAULT_PROFILE,
    ResponseFormatMode,
    ServerProfile,
)

__all__ = (
    "ChatCompletion",
    "ChatCompletionChunk",
    "RequestEncoder",
    "SSEDecoder",
    "StreamAssembler",
    "StreamTruncatedError",
    "decode_completion",
)


class StreamTruncatedError(ModelReplyError):
    """The stream ended before the reply did (no ``finish_reason``).

    ``connection_lost`` is true when the connection broke (a backend killed
    mid-stream) rather than closing cleanly; a pool fails such calls over to
    another backend, since nothing of the reply reached the caller.
    """

    def __init__(self, message: str, *, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost


# --- request -----------------------------------------------------------------


class _Function(msgspec.Struct, gc=False):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct, gc=False):
    id: str
    function: _Function
    type: str = "function"


class _Message(msgspec.Struct, gc=False, omit_defaults=True):
    role: str
    content: str
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _FunctionDef(msgspec.Struct, gc=False):
    name: str
    description: str
    parameters: dict[str, Any]


class _ToolDef(msgspec.Struct, gc=False):
    function: _FunctionDef
    type: str = "function"


class _StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool = True


class ChatRequest(msgspec.Struct, gc=False, omit_defaults=True):
    """The body of ``POST /v1/chat/completions`` (the fields Podium sets)."""

    model: str
    messages: list[_Message]
    tools: msgspec.Raw | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    tool_choice: msgspec.Raw | None = None
    response_format: msgspec.Raw | None = None


class _JSONSchemaFormat(msgspec.Struct, gc=False, omit_defaults=True):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class _ResponseFormat(msgspec.Struct, gc=False):
    json_schema: _JSONSchemaFormat
    type: str = "json_schema"


_REQUEST_FIELDS = frozenset(ChatRequest.__struct_fields__)
#: Fields ``extra_body`` may not set: they decide how the reply is read.
_RESERVED_FIELDS = frozenset({"messages", "stream", "stream_options"})
_TOOL_CHOICE_MODES = {
    m: msgspec.Raw(b'"' + m.encode() + b'"') for m in ("auto", "required", "none")
}


def _wire_message(m: Message) -> _Message:
    if m.tool_calls:
        calls = [_ToolCall(c.id, _Function(c.name, c.arguments)) for c in m.tool_calls]
        return _Message(m.role, m.content, calls, m.tool_call_id, m.name)
    return _Message(m.role, m.content, None, m.tool_call_id, m.name)


class RequestEncoder:
    """Encodes requests for one model name.

    Tool schemas are encoded once per tools tuple (agents reuse theirs), and
    ``extra_body`` fields (the endpoint's and the request's) are spliced into
    the JSON object without re-encoding the rest. Precedence, lowest first:
    Podium's own value for a field, the endpoint's ``extra_body``, the
    request's ``extra_body`` (so ``extra_body = { tool_choice = "auto" }``
    replaces the ``tool_choice`` an agent would send).
    """

    def __init__(
        self,
        model: str,
        *,
        extra_body: dict[str, Any] | None = None,
        include_usage: bool = True,
        profile: ServerProfile = DEFAULT_PROFILE,
        response_format: ResponseFormatMode | None = None,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.profile = profile
        #: how native structured output is sent (the profile's unless set)
        self.response_format: ResponseFormatMode = response_format or profile.response_format
        # the endpoint's defaults, for requests whose settings leave them unset
        self._default_choice = tool_choice
        self._default_max_tokens = max_tokens
        self._default_temperature = temperature
        self._extra = dict(extra_body or {})
        reserved = _RESERVED_FIELDS.intersection(self._extra)
        if reserved:
            raise ConfigError(
                f"extra_body may not set {', '.join(sorted(reserved))}: Podium sets"
                " them to read the reply"
            )
        self._enc = msgspec.json.Encoder()
        self._include_usage = include_usage
        self._tools_cache: dict[int, tuple[tuple[ToolDefinition, ...], msgspec.Raw]] = {}
        self._format_cache: dict[int, tuple[OutputSchema, msgspec.Raw | None]] = {}

    def _tools(self, tools: tuple[ToolDefinition, ...]) -> msgspec.Raw | None:
        if not tools:
            return None
        hit = self._tools_cache.get(id(tools))
        if hit is not None and hit[0] is tools:
            return hit[1]
        raw = msgspec.Raw(
            self._enc.encode(
                [_ToolDef(_FunctionDef(t.name, t.description, t.parameters)) for t in tools]
            )
        )
        if len(self._tools_cache) >= 256:
            self._tools_cache.clear()
        self._tools_cache[id(tools)] = (tools, raw)  # holding the tuple keeps its id unique
        return raw

    def _tool_choice(
        self,
        choice: str | None,
        tools: tuple[ToolDefinition, ...],
        output: OutputSchema | None,
    ) -> msgspec.Raw | None:
        # only with tools: servers (vLLM, OpenAI) reject a tool_choice without them
        if not tools:
            return None
        if choice is None:
            choice = self._default_choice
        if choice is None and output is not None and output.mode == "tool":
            choice = self._forced_answer(tools, output.name)
        if choice is None:
            return None
        raw = _TOOL_CHOICE_MODES.get(choice)
        if raw is None:
            raw = msgspec.Raw(self._enc.encode({"type": "function", "function": {"name": choice}}))
        return raw

    def _forced_answer(self, tools: tuple[ToolDefinition, ...], answer: str) -> str | None:
        """The ``tool_choice`` that makes a tool-mode agent's reply a tool call, in a form
        the server honours: ``required`` (the answer or a tool on the way to it), else
        the answer tool by name when it is the only tool; None where neither is safe."""
        forms = self.profile.tool_choice
        if "named" in forms and len(tools) == 1 and tools[0].name == answer:
            return answer
        if "required" in forms:
            return "required"
        return None

    def _response_format(self, output: OutputSchema) -> msgspec.Raw | None:
        """OpenAI's ``json_schema`` response format (native mode), encoded once per agent."""
        hit = self._format_cache.get(id(output))
        if hit is not None and hit[0] is output:
            return hit[1]
        raw = None
        mode = self.response_format
        if output.mode == "native" and mode == "json_schema":
            spec = _JSONSchemaFormat(
                output.name, output.schema, output.description or None, output.strict
            )
            raw = msgspec.Raw(self._enc.encode(_ResponseFormat(spec)))
        elif output.mode == "native" and mode == "json_object":
            # llama.cpp (both servers) and TGI constrain the reply to the schema given here
            fmt = {"type": "json_object", self.profile.schema_key: output.schema}
            raw = msgspec.Raw(self._enc.encode(fmt))
        if len(self._format_cache) >= 256:
            self._format_cache.clear()
        self._format_cache[id(output)] = (output, raw)  # holding it keeps its id unique
        return raw

    def encode(self, request: ModelRequest, *, stream: bool = False) -> bytes:
        """The request body as JSON bytes."""
        s = request.settings
        body = ChatRequest(
            self.model,
            [_wire_message(m) for m in request.messages],
            self._tools(request.tools),
            self._default_max_tokens if s.max_tokens is None else s.max_tokens,
            self._default_temperature if s.temperature is None else s.temperature,
            list(s.stop) if s.stop else None,
            s.seed,
            stream,
            _StreamOptions() if stream and self._include_usage else None,
            self._tool_choice(s.tool_choice, request.tools, s.output),
            None if s.output is None else self._response_format(s.output),
        )
        extra = {**self._extra, **s.extra_body} if s.extra_body else self._extra
        if not extra:
            return self._enc.encode(body)
        if _REQUEST_FIELDS.isdisjoint(extra):
            head = self._enc.encode(body)
            return head[:-1] + b"," + self._enc.encode(extra)[1:]
        return self._merged(body, extra, bool(request.tools))

    def _merged(self, body: ChatRequest, extra: dict[str, Any], tools: bool) -> bytes:
        """``body`` with ``extra``'s keys over its own: an ``extra_body`` key that names a
        standard field (``tool_choice``, ``max_tokens``, ``response_format``…) replaces
        Podium's value for it. ``tool_choice`` is dropped from a request without tools
        (vLLM and OpenAI refuse one there), and the fields that say how Podium reads the
        reply (``messages``, ``stream``, ``stream_options``) are refused."""
        reserved = _RESERVED_FIELDS.intersection(extra)
        if reserved:
            raise ConfigError(
                f"extra_body may not set {', '.join(sorted(reserved))}: Podium sets"
                " them to read the reply"
            )
        # The encoded fields (tools, tool_choice, response_format) are msgspec.Raw, which
        # to_builtins cannot take apart: decode the encoded body instead (rare: only when
        # extra_body overrides a standard field).
        merged: dict[str, Any] = msgspec.json.decode(self._enc.encode(body))
        merged.update(extra)
        if not tools:
            merged.pop("tool_choice", None)
        return self._enc.encode(merged)


# --- reply -------------------------------------------------------------------


class _RespFunction(msgspec.Struct, gc=False):
    name: str = ""
    arguments: str | dict[str, Any] = ""


class _RespToolCall(msgspec.Struct, gc=False):
    function: _RespFunction
    id: str | None = None


class _RespMessage(msgspec.Struct, gc=False):
    content: str | None = None
    tool_calls: list[_RespToolCall] | None = None
    reasoning_content: str | None = None  # vLLM, SGLang, DeepSeek
    reasoning: str | None = None  # newer vLLM, Ollama


class _Choice(msgspec.Struct, gc=False):
    message: _RespMessage
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None


class _Timings(msgspec.Struct, gc=False):
    """llama.cpp's ``timings``: ``cache_n`` is the prompt tokens its cache held."""

    cache_n: int | None = None


class _WireError(msgspec.Struct, gc=False):
    message: str = ""


class ChatCompletion(msgspec.Struct, gc=False):
    """A non-streamed reply."""

    choices: list[_Choice]
    model: str = ""
    usage: _Usage | None = None
    timings: _Timings | None = None


_completion_decoder = msgspec.json.Decoder(ChatCompletion)
_json_encode = msgspec.json.encode


def _arguments(raw: str | dict[str, Any]) -> str:
    # Ollama's native shape is an object; the OpenAI shape is a JSON string.
    return raw if isinstance(raw, str) else _json_encode(raw).decode()


def _usage(usage: _Usage | None, timings: _Timings | None) -> Usage:
    if usage is None:
        return Usage(requests=1)
    cached = 0
    if usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens:
        cached = usage.prompt_tokens_details.cached_tokens
    elif timings is not None and timings.cache_n:
        cached = timings.cache_n
    return Usage(usage.prompt_tokens, usage.completion_tokens, cached, 1)


def decode_completion(body: bytes, backend: str = "", prompt_tokens: int = 0) -> ModelResponse:
    """Decode a chat-completion body; anything malformed is :class:`ModelReplyError`.

    A body without usage gets an estimate, flagged ``usage_estimated``: the
    caller's ``prompt_tokens`` as input, about four characters per output token.
    """
    who = f"{backend}: " if backend else ""  # a pool's error must say which backend
    try:
        reply = _completion_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ModelReplyError(f"{who}invalid chat-completion body: {exc}") from exc
    if not reply.choices:
        raise ModelReplyError(f"{who}chat-completion body has no choices")
    choice = reply.choices[0]
    msg = choice.message
    calls: tuple[ToolCall, ...] = ()
    if msg.tool_calls:
        calls = tuple(
            ToolCall(c.id or f"call_{i}", c.function.name, _arguments(c.function.arguments))
            for i, c in enumerate(msg.tool_calls)
        )
    finish = choice.finish_reason or ("tool_calls" if calls else "stop")
    content = msg.content or ""
    reasoning = msg.reasoning_content or msg.reasoning or ""
    estimated = reply.usage is None
    if estimated:
        chars = len(content) + len(reasoning) + sum(len(c.name) + len(c.arguments) for c in calls)
        usage = Usage(prompt_tokens, (chars + 3) // 4, 0, 1)
    else:
        usage = _usage(reply.usage, reply.timings)
    return ModelResponse(
        content=content,
        reasoning=reasoning,
        tool_calls=calls,
        usage=usage,
        usage_estimated=estimated,
        finish_reason=finish,
        model=reply.model,
        backend=backend,
    )


# --- streaming ---------------------------------------------------------------


class _FunctionDelta(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class _ToolCallDelta(msgspec.Struct, gc=False):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _ChunkChoice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(msgspec.Struct, gc=False):
    """One ``chat.completion.chunk`` event of a stream."""

    choices: list[_ChunkChoice] = []
    model: str = ""
    usage: _Usage | None = None
    timings: _Timings | None = None
    error: _WireError | str | None = None  # a string: Ollama's and some proxies' shape


_chunk_decoder = msgspec.json.Decoder(ChatCompletionChunk)


class SSEDecoder:
    """Splits a server-sent-events byte stream into the ``data`` of each event.

    Comments (``: ping``), ``event:``/``id:``/``retry:`` lines and CRLF line
    ends are handled; a trailing line without its newline is held until more
    bytes arrive, and dropped at the end (it is a truncated event). The pieces
    of a line are joined once, when its newline comes (a line sent in many reads
    costs its length, not its length times the reads), and an event may hold
    at most ``max_event_bytes``: a server that sends more without ending it is
    a :class:`ModelReplyError`, not a process running out of memory.
    """

    __slots__ = ("_data", "_data_size", "_held", "_held_size", "max_event_bytes")

    def __init__(self, *, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_event_bytes = max_event_bytes
        self._held: list[bytes] = []  # the pieces of the line not yet ended
        self._held_size = 0
        self._data: list[bytes] = []  # the data lines of the event not yet ended
        self._data_size = 0

    def _check_size(self) -> None:
        if self._held_size + self._data_size > self.max_event_bytes:
            raise ModelReplyError(
                f"stream event longer than {self.max_event_bytes} bytes without its end"
            )

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of the events completed by ``chunk``."""
        held = self._held
        if b"\n" not in chunk:
            if chunk:
                held.append(chunk)
                self._held_size += len(chunk)
                self._check_size()
            return []
        if held:
            held.append(chunk)
            buf = b"".join(held)
            held.clear()
        else:
            buf = chunk
        lines = buf.split(b"\n")
        tail = lines.pop()
        out: list[bytes] = []
        data = self._data
        size = self._data_size
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                size = 0
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
                size += len(line)
        self._data_size = size
        self._held_size = len(tail)
        if tail:
            held.append(tail)
        self._check_size()
        return out

    def close(self) -> list[bytes]:
        """Events left at the end of the stream (complete lines without the blank line)."""
        out = [b"\n".join(self._data)] if self._data else []
        self._data = []
        self._data_size = 0
        self._held = []
        self._held_size = 0
        return out


class _CallBuilder:
    __slots__ = ("args", "id", "name")

    def __init__(self, id: str | None, name: str) -> None:
        self.id = id
        self.name = name
        self.args: list[str] = []


class StreamAssembler:
    """Assembles chunks into one :class:`ModelResponse`, recording token timing.

    Feed it each event's data with the time (seconds since the call began)
    it arrived; with ``deltas=True`` :meth:`feed` also returns the
    :class:`StreamDelta` items for a caller that streams. :meth:`finish`
    raises :class:`StreamTruncatedError` if no ``finish_reason`` came.
    """

    __slots__ = (
        "_by_id",
        "_by_index",
        "_calls",
        "_content",
        "_deltas",
        "_finish",
        "_model",
        "_reasoning",
        "_times",
        "_timings",
        "_usage",
        "_who",
        "backend",
        "done",
    )

    def __init__(self, *, backend: str = "", deltas: bool = False) -> None:
        self.backend = backend
        self._who = f"{backend}: " if backend else ""  # errors name the backend
        self.done = False
        self._deltas = deltas
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_CallBuilder] = []
        self._by_index: dict[int, int] = {}  # the wire's index -> the call it now feeds
        self._by_id: dict[str, int] = {}
        self._finish: str | None = None
        self._usage: _Usage | None = None
        self._timings: _Timings | None = None
        self._model = ""
        self._times: list[float] = []

    def feed(self, data: bytes, now: float) -> list[StreamDelta]:
        """Take one event's data; ``[DONE]`` marks the end: what follows it is ignored
        (as OpenAI's SDK does), whether it came in the same read or a later one."""
        if self.done:
            return []
        if data == b"[DONE]":
            self.done = True
            return []
        try:
            chunk = _chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ModelReplyError(f"{self._who}invalid stream chunk: {exc}") from exc
        error = chunk.error
        if error is not None:
            text = error if isinstance(error, str) else error.message
            # In the stream's own words: a context overflow (Ollama sends its "prompt too
            # long" there) or an invalid request is the caller's, never worth asking again
            typed = http_error(500, _json_encode({"error": {"message": text}}),
                               backend=self.backend)
            if typed.invalid_request:
                raise typed
            raise ModelReplyError(f"{self._who}backend error in stream: {text}")
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.timings is not None:
            self._timings = chunk.timings
        if chunk.model:
            self._model = chunk.model
        out: list[StreamDelta] = []
        for choice in chunk.choices:
            delta = choice.delta
            if delta is not None:
                thought = delta.reasoning_content or delta.reasoning
                if thought:  # a token too: it counts for time to first token
                    self._reasoning.append(thought)
                    self._times.append(now)
                    if self._deltas:
                        out.append(StreamDelta(reasoning=thought))
                if delta.content:
                    self._content.append(delta.content)
                    self._times.append(now)
                    if self._deltas:
                        out.append(StreamDelta(content=delta.content))
                if delta.tool_calls:
                    self._tool_deltas(delta.tool_calls, now, out)
            if choice.finish_reason:
                self._finish = choice.finish_reason
            break  # only the first choice (n=1)
        return out

    def _tool_deltas(
        self, deltas: list[_ToolCallDelta], now: float, out: list[StreamDelta]
    ) -> None:
        calls = self._calls
        for d in deltas:
            fn = d.function
            name = fn.name if fn is not None and fn.name else ""
            args = fn.arguments if fn is not None and fn.arguments else ""
            if not isinstance(args, str):
                args = _arguments(args)
            # Calls are numbered in the order they start, whatever the wire's index says:
            # some servers skip indexes (a first call at 1) or send every call at index 0
            # with a new id each; later pieces without an id belong to the call their
            # index last started, pieces with a known id to that call.
            found = self._by_id.get(d.id) if d.id else None
            i = self._by_index.get(d.index) if found is None else found
            if i is None or (d.id and calls[i].id and d.id != calls[i].id):
                i = len(calls)
                calls.append(_CallBuilder(None, ""))
            self._by_index[d.index] = i
            call = calls[i]
            if d.id and not call.id:
                call.id = d.id
                self._by_id[d.id] = i
            if name and not call.name:
                call.name = name
            if args:
                call.args.append(args)
            self._times.append(now)
            if self._deltas:
                out.append(
                    StreamDelta(
                        tool_call_index=i,
                        tool_call_id=d.id,
                        tool_name=name or None,
                        arguments=args,
                    )
                )

    @property
    def tokens(self) -> int:
        """Token events so far (content, reasoning, tool-call pieces)."""
        return len(self._times)

    def finish(self, *, connection_lost: bool = False, prompt_tokens: int = 0) -> ModelResponse:
        """The assembled response; raises if the stream stopped early.

        A stream without usage (a server that ignores ``include_usage``) gets
        usage counted here: one output token per token event, the caller's
        ``prompt_tokens`` estimate as input, and ``usage_estimated`` set.
        """
        if self._finish is None:
            where = "mid tool-call" if self._calls else "before finish_reason"
            how = "connection lost" if connection_lost else "stream ended"
            raise StreamTruncatedError(
                f"{self._who}{how} {where}", connection_lost=connection_lost
            )
        calls = tuple(
            ToolCall(c.id or f"call_{i}", c.name, "".join(c.args))
            for i, c in enumerate(self._calls)
        )
        for c in calls:
            if not c.name:
                raise ModelReplyError(f"{self._who}streamed tool call {c.id} has no name")
        times = self._times
        estimated = self._usage is None
        usage = (
            Usage(prompt_tokens, len(times), 0, 1)
            if estimated
            else _usage(self._usage, self._timings)
        )
        return ModelResponse(
            content="".join(self._content),
            reasoning="".join(self._reasoning),
            tool_calls=calls,
            usage=usage,
            usage_estimated=estimated,
            finish_reason=self._finish,
            model=self._model,
            backend=self.backend,
            ttft_s=times[0] if times else None,
            token_times_s=tuple(times),
        )
