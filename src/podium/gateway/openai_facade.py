"""``POST /v1/chat/completions``: any OpenAI client library talks to a Podium agent.

``model`` names the agent. The agent's input is the last user message (or the
last message, if no user wrote one); earlier
messages, if any, are put before it as a transcript (the agent keeps its own
instructions and tools, so ``tools`` and sampling options in the request do
not apply). An agent with an ``output_type`` answers with its JSON (what OpenAI's
``response_format`` gives, so ``client.beta.chat.completions.parse`` reads it); a
``response_format`` asking for JSON is accepted for such an agent (its own schema
applies, the request's is not used) and refused with a 400 for an agent that answers in
text. With ``thread_id`` (Podium's extension field) the run continues that
thread instead: the input is the last message alone, the history the thread's.
The reply is the run's final answer: one ``chat.completion``, or
with ``stream: true`` OpenAI's ``chat.completion.chunk`` events — a role
chunk at once, the answer when the run ends, a chunk with
``finish_reason: "stop"``, an optional usage chunk, then ``data: [DONE]``.

Example::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=KEY)
    reply = client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": "Where is A-1?"}])
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import msgspec
from starlette.responses import Response, StreamingResponse

from podium.engine.records import RunRecord
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.schemas import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    ChatRequest,
    ChatUsage,
    ChunkChoice,
    ChunkDelta,
)
from podium.gateway.service import Gateway

__all__ = ("ChatRequest", "complete", "input_from_messages")

_encode = msgspec.json.Encoder().encode
_WAIT_ERRORS: tuple[type[BaseException], ...] = (ApiError, *UNAVAILABLE)


def _text(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text or "" for p in content if p.type == "text")


def input_from_messages(messages: list[ChatMessage]) -> str:
    """The run's input: the last user message, after a transcript of what came before it."""
    # Without a user message, the last message (whoever wrote it) is the question.
    last_user = max(
        (i for i, m in enumerate(messages) if m.role == "user"), default=len(messages) - 1
    )
    earlier = [f"{m.role}: {_text(m)}" for m in messages[:last_user] if _text(m)]
    question = _text(messages[last_user])
    if not earlier:
        return question
    return "Conversation so far:\n" + "\n".join(earlier) + "\n\nuser: " + question


def _usage(record: RunRecord) -> ChatUsage:
    u = record.usage
    return ChatUsage(u.input_tokens, u.output_tokens, u.total_tokens)


def _check_completed(record: RunRecord) -> None:
    if record.status == "completed":
        return
    if record.done:
        raise ApiError(
            502,
            "run_failed",
            f"run {record.run_id} {record.status}: {record.error or record.reason}",
        )
    raise ApiError(504, "timeout", f"run {record.run_id} did not finish within the wait timeout")


async def complete(
    gw: Gateway, tenant: Tenant, body: ChatRequest, *, idempotency_key: str | None = None
) -> Response:
    """Run the agent ``body.model`` on the conversation and answer like OpenAI would.

    With ``idempotency_key`` a retried request answers from the run the first made.
    """
    fmt = body.response_format
    wants_json = fmt is not None and fmt.type != "text"
    if fmt is not None and wants_json and gw.served(body.model, "model").agent.output is None:
        raise ApiError(
            400,
            "unsupported_response_format",
            f"agent {body.model!r} answers in text: response_format {fmt.type!r} needs an "
            "agent declared with an output_type (whose schema is used)",
            field="response_format",
        )
    if body.thread_id is None:
        user_input = input_from_messages(body.messages)
    else:  # the thread holds the conversation: only the new message is the input
        user_input = input_from_messages(body.messages[-1:])
    record, _ = await gw.submit(
        tenant,
        body.model,
        user_input,
        body.metadata or {},
        field="model",
        idempotency_key=idempotency_key,
        thread_id=body.thread_id,
    )
    completion_id = "chatcmpl-" + record.run_id
    created = int(time.time())
    timeout = gw.config.server.wait_timeout_s
    if not body.stream:
        record = await gw.wait(record.run_id, timeout)
        _check_completed(record)
        reply = ChatCompletion(
            completion_id,
            "chat.completion",
            created,
            body.model,
            [ChatChoice(0, AssistantMessage("assistant", record.output or ""), "stop")],
            _usage(record),
        )
        return Response(
            _encode(reply),
            media_type="application/json",
            headers={"X-Podium-Run-Id": record.run_id},
        )
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return StreamingResponse(
        _chunks(gw, record.run_id, completion_id, created, body.model, timeout, include_usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Podium-Run-Id": record.run_id},
    )


async def _chunks(
    gw: Gateway,
    run_id: str,
    completion_id: str,
    created: int,
    model: str,
    wait_s: float,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    def chunk(delta: ChunkDelta, finish: str | None = None) -> bytes:
        c = ChatCompletionChunk(
            completion_id, "chat.completion.chunk", created, model, [ChunkChoice(0, delta, finish)]
        )
        return b"data: " + _encode(c) + b"\n\n"

    yield chunk(ChunkDelta(role="assistant", content=""))
    try:
        record = await gw.wait(run_id, wait_s)
    except _WAIT_ERRORS as exc:
        # The store stayed away past the wait's grace (or lost the run): headers are
        # sent, so the failure travels in-band like any other.
        message = exc.message if isinstance(exc, ApiError) else "the run store is unreachable"
        error = {"error": {"type": "unavailable", "message": f"run {run_id}: {message}"}}
        yield b"data: " + _encode(error) + b"\n\n"
        yield b"data: [DONE]\n\n"
        return
    if record.status == "completed":
        if record.output:
            yield chunk(ChunkDelta(content=record.output))
        yield chunk(ChunkDelta(), "stop")
    else:
        # Headers are sent: the failure travels in-band, as OpenAI's own streams do.
        why = record.error or record.reason or f"the run did not finish within {wait_s}s"
        error = {"error": {"type": "run_failed", "message": f"run {run_id} {record.status}: {why}"}}
        yield b"data: " + _encode(error) + b"\n\n"
    if include_usage:
        usage = ChatCompletionChunk(
            completion_id, "chat.completion.chunk", created, model, [], _usage(record)
        )
        yield b"data: " + _encode(usage) + b"\n\n"
    yield b"data: [DONE]\n\n"
