"""The OpenAI chat-completions reply, sans I/O: the structs of a completion (only the
fields Podium reads: msgspec skips the rest without building objects for them) and
:func:`decode_completion`, a reply body to a :class:`~podium.models.base.ModelResponse`.
Shared by the whole reply and the streamed one (:mod:`podium.models.openai_stream`)."""

from __future__ import annotations

from typing import Any

import msgspec

from podium.errors import ModelReplyError
from podium.messages import ToolCall, Usage
from podium.models.base import (
    ModelResponse,
)

__all__ = ("ChatCompletion", "StreamTruncatedError", "decode_completion")


class StreamTruncatedError(ModelReplyError):
    """The stream ended before the reply did (no ``finish_reason``).

    ``connection_lost`` is true when the connection broke (a backend killed
    mid-stream) rather than closing cleanly; a pool fails such calls over to
    another backend, since nothing of the reply reached the caller.
    """

    def __init__(self, message: str, *, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost


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


class WireUsage(msgspec.Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None


class WireTimings(msgspec.Struct, gc=False):
    """llama.cpp's ``timings``: ``cache_n`` is the prompt tokens its cache held."""

    cache_n: int | None = None


class WireError(msgspec.Struct, gc=False):
    message: str = ""


class ChatCompletion(msgspec.Struct, gc=False):
    """A non-streamed reply."""

    choices: list[_Choice]
    model: str = ""
    usage: WireUsage | None = None
    timings: WireTimings | None = None


_completion_decoder = msgspec.json.Decoder(ChatCompletion)
json_encode = msgspec.json.encode


def wire_arguments(raw: str | dict[str, Any]) -> str:
    # Ollama's native shape is an object; the OpenAI shape is a JSON string.
    return raw if isinstance(raw, str) else json_encode(raw).decode()


def wire_usage(usage: WireUsage | None, timings: WireTimings | None) -> Usage:
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
            ToolCall(c.id or f"call_{i}", c.function.name, wire_arguments(c.function.arguments))
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
        usage = wire_usage(reply.usage, reply.timings)
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


