"""The OpenAI chat-completions stream, sans I/O: :class:`SSEDecoder` turns the bytes of a
``stream=true`` reply into chunks, :class:`StreamAssembler` the chunks into deltas and, at
the end, one :class:`~podium.models.base.ModelResponse`."""

from __future__ import annotations

from typing import Any

import msgspec

from podium.errors import ModelReplyError
from podium.messages import ToolCall, Usage
from podium.models.base import (
    ModelResponse,
    StreamDelta,
)
from podium.models.openai_errors import http_error
from podium.models.openai_reply import (
    StreamTruncatedError,
    WireError,
    WireTimings,
    WireUsage,
    json_encode,
    wire_arguments,
    wire_usage,
)

__all__ = ("ChatCompletionChunk", "SSEDecoder", "StreamAssembler")


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
    usage: WireUsage | None = None
    timings: WireTimings | None = None
    error: WireError | str | None = None  # a string: Ollama's and some proxies' shape


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
        self._usage: WireUsage | None = None
        self._timings: WireTimings | None = None
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
            typed = http_error(500, json_encode({"error": {"message": text}}),
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
                args = wire_arguments(args)
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
            else wire_usage(self._usage, self._timings)
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
