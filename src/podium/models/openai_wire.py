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

from podium.errors import ConfigError
from podium.messages import Message
from podium.models.base import (
    ModelRequest,
    OutputSchema,
    ToolDefinition,
)
from podium.models.openai_reply import ChatCompletion, StreamTruncatedError, decode_completion
from podium.models.openai_stream import ChatCompletionChunk, SSEDecoder, StreamAssembler
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
