"""``POST /v1/chat/completions``: any OpenAI client library talks to a Podium agent.

``model`` names the agent. The agent's input is the last user message (or the
last message, if no user wrote one); earlier
messages, if any, are put before it as a transcript (the agent keeps its own
instructions and tools, so ``tools`` and sampling options in the request do
not apply). An agent with an ``output_type`` answers with its JSON (what OpenAI's
``response_format`` gives, so ``client.beta.chat.completions.parse`` reads it); a
``response_format`` asking for JSON is accepted for such an agent if a schema it gives
is the agent's (else a 400 ``response_format_mismatch``: :mod:`.response_format`),
and refused with a 400 for an agent that answers in
text. With ``thread_id`` (Podium's extension field) the run continues that
thread instead: the input is the last message alone, the history the thread's.
The reply is the run's final answer: one ``chat.completion``, or
with ``stream: true`` OpenAI's ``chat.completion.chunk`` events — a role
chunk at once, then one content chunk per model token as the backend produces
it, a chunk with ``finish_reason: "stop"``, a usage chunk if
``stream_options.include_usage``, then ``data: [DONE]``.

The streamed text is what the model says at each step, in order, a blank line
between two steps that both say something. A step whose model call starts again
after some of its text was sent (its backend lost mid-stream, its worker dead) ends
the stream with an error chunk of type ``stream_reset`` (OpenAI's SDKs raise it):
the text received is not the answer, and is never spliced with the new one.
Agents whose tool-calling steps say nothing (the usual case) stream exactly the
final answer. A step whose tokens were not streamed (a model that cannot stream,
tokens lost in transit) arrives as one chunk when it is journaled, so the text is
always whole. A structured agent's JSON is sent in one chunk once validated.

Example::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=KEY)
    reply = client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": "Where is A-1?"}])
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping

import msgspec
from starlette.responses import Response, StreamingResponse

from podium.engine.records import ApprovalRequested, ModelTurn, RunFinished, RunRecord, StepRecord
from podium.gateway.auth import Tenant
from podium.gateway.client_tools import (
    ClientCall,
    client_calls,
    client_tools_metadata,
    parse_call_id,
    resume_listening,
)
from podium.gateway.errors import ApiError, run_still_going, run_waiting
from podium.gateway.live import live_events
from podium.gateway.outage import UNAVAILABLE
from podium.gateway.response_format import check_response_format
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
    ChunkToolCall,
    FunctionOut,
    ToolCallOut,
)
from podium.gateway.service import Gateway
from podium.observe.tracing import submit_context
from podium.streaming.base import TokenSubscription

__all__ = ("ChatRequest", "complete", "input_from_messages")

_encode = msgspec.json.Encoder().encode
_WAIT_ERRORS: tuple[type[BaseException], ...] = (ApiError, *UNAVAILABLE)
#: A stopping server's last chunk (an error chunk, as OpenAI sends them: its SDK raises it).
_SHUTTING_DOWN = b"data: " + _encode({"error": {
    "type": "shutting_down",
    "message": "the server is stopping; the run goes on: GET /v1/runs/{id} for its end",
}}) + b"\n\n"
#: Between the texts of two steps in a stream (tool steps that say something, then the answer).
STEP_BREAK = "\n\n"


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
    # The run exists: the same request again would start another one (its tools again).
    # OpenAI's SDKs retry a 409 and every 5xx, twice by default, unless told not to.
    headers = {"X-Podium-Run-Id": record.run_id, "x-should-retry": "false"}
    if record.status == "waiting":  # parked on a human: no answer is coming by itself
        raise ApiError(409, "run_waiting", run_waiting(record.run_id), headers=headers)
    if record.done:
        raise ApiError(
            502,
            "run_failed",
            f"run {record.run_id} {record.status}: {record.error or record.reason}",
            headers=headers,
        )
    raise ApiError(504, "timeout", run_still_going(record.run_id), headers=headers)



async def complete(
    gw: Gateway,
    tenant: Tenant,
    body: ChatRequest,
    *,
    idempotency_key: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Run the agent ``body.model`` on the conversation and answer like OpenAI would.

    With ``idempotency_key`` a retried request answers from the run the first made; the
    run continues the W3C trace context (``traceparent``) of the request's ``headers``.
    """
    fmt = body.response_format
    wants_json = fmt is not None and fmt.type != "text"
    output = gw.served(body.model, "model").agent.output
    structured = output is not None
    if fmt is not None and wants_json and not structured:
        raise ApiError(
            400,
            "unsupported_response_format",
            f"agent {body.model!r} answers in text: response_format {fmt.type!r} needs an "
            "agent declared with an output_type (whose schema is used)",
            field="response_format",
        )
    if fmt is not None and output is not None and fmt.json_schema is not None:
        check_response_format(body.model, output, fmt.json_schema)
    outputs = tool_outputs(body.messages)
    if outputs:  # the client ran the tools a reply handed it: that run goes on
        record, after, tokens = await _resume(gw, tenant, body, outputs, structured)
    else:
        record, tokens = await _start(gw, tenant, body, idempotency_key, headers, structured)
        after = -1
    completion_id = "chatcmpl-" + record.run_id
    created = int(time.time())
    timeout = gw.config.server.wait_timeout_s
    if not body.stream:
        record = await gw.wait(record.run_id, timeout)
        calls = await _client_calls(gw, record)
        if calls:
            choice = ChatChoice(0, AssistantMessage("assistant", calls[0].said or None, [
                ToolCallOut(c.id, "function", FunctionOut(c.name, c.arguments)) for c in calls
            ]), "tool_calls")
        else:
            _check_completed(record)
            choice = ChatChoice(0, AssistantMessage("assistant", record.output or ""), "stop")
        reply = ChatCompletion(
            completion_id, "chat.completion", created, body.model, [choice], _usage(record)
        )
        return Response(
            _encode(reply),
            media_type="application/json",
            headers={"X-Podium-Run-Id": record.run_id},
        )
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    chunks = _chunks(
        gw,
        record.run_id,
        tokens,
        completion_id,
        created,
        body.model,
        timeout,
        include_usage,
        structured,
        after,
    )
    return StreamingResponse(
        gw.stream(chunks, tokens, _SHUTTING_DOWN),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Podium-Run-Id": record.run_id},
    )


async def _start(
    gw: Gateway,
    tenant: Tenant,
    body: ChatRequest,
    idempotency_key: str | None,
    headers: Mapping[str, str] | None,
    structured: bool,
) -> tuple[RunRecord, TokenSubscription | None]:
    """A new run for the request (with the client's tools, if it sent some)."""
    client_tools = client_tools_metadata(
        gw, body.model, body.tools, body.tool_choice, nested=True
    )
    if body.thread_id is None:
        user_input = input_from_messages(body.messages)
    else:  # the thread holds the conversation: only the new message is the input
        user_input = input_from_messages(body.messages[-1:])
    run_id = gw.new_run_id(tenant, idempotency_key)
    # Listening before the run exists: its worker streams it from the first token. A
    # structured answer is sent whole, once validated (a client parses the JSON at once).
    tokens = await gw.listen(run_id) if body.stream and not structured else None
    try:
        with submit_context(
            gw.tracer, headers or {}, body.metadata or {}, body.model, "/v1/chat/completions"
        ) as metadata:
            record, _ = await gw.submit(
                tenant,
                body.model,
                user_input,
                metadata,
                field="model",
                idempotency_key=idempotency_key,
                run_id=run_id,
                thread_id=body.thread_id,
                client_tools=client_tools,
            )
    except BaseException:
        if tokens is not None:
            tokens.close()
        raise
    return record, tokens


async def _resume(
    gw: Gateway,
    tenant: Tenant,
    body: ChatRequest,
    outputs: list[tuple[str, str]],
    structured: bool,
) -> tuple[RunRecord, int, TokenSubscription | None]:
    """The run the tool outputs answer, resumed: its record, the journal position the
    stream starts after, and the token subscription (taken before it resumes)."""
    place = parse_call_id(outputs[0][0])
    assert place is not None
    return await resume_listening(gw, tenant, place[0], body.model, outputs,
                                  body.stream and not structured)


def tool_outputs(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    """The trailing ``tool`` messages, as ``(call id, output)``, when they answer calls this
    server handed out (others are part of a transcript, as before)."""
    found: list[tuple[str, str]] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        if message.tool_call_id is None or parse_call_id(message.tool_call_id) is None:
            return []
        found.append((message.tool_call_id, _text(message)))
    found.reverse()
    return found


async def _client_calls(gw: Gateway, record: RunRecord) -> list[ClientCall]:
    """The client-tool calls the run waits for, if it waits for nothing else."""
    calls, human = await client_calls(gw, record)
    return [] if human else calls


def _reset_message(run_id: str) -> str:
    return (
        f"run {run_id}: the model's answer started again (its backend was lost mid-stream)"
        " after part of it was sent; discard the text received: the run goes on, and"
        f" GET /v1/runs/{run_id} gives its answer"
    )


class _Said:
    """The text streamed so far, per step, and what the next piece of a step needs."""

    __slots__ = ("spoke", "steps")

    def __init__(self) -> None:
        self.steps: dict[int, list[str]] = {}
        self.spoke = False

    def piece(self, step: int, text: str) -> str:
        """``text`` as sent for ``step``: a new step's text starts after a blank line."""
        pieces = self.steps.get(step)
        lead = ""
        if pieces is None:
            pieces = self.steps[step] = []
            lead = STEP_BREAK if self.spoke else ""
        pieces.append(text)
        self.spoke = True
        return lead + text

    def spoke_at(self, step: int) -> bool:
        """Whether text of ``step`` was sent."""
        return bool(self.steps.get(step))

    def rest(self, step: int, text: str) -> str:
        """What of the step's whole ``text`` was not streamed ("" if all was, or if what
        was streamed is not its start: a retried call)."""
        got = "".join(self.steps.get(step, ()))
        return text[len(got) :] if text.startswith(got) else ""


async def _chunks(
    gw: Gateway,
    run_id: str,
    tokens: TokenSubscription | None,
    completion_id: str,
    created: int,
    model: str,
    wait_s: float,
    include_usage: bool,
    structured: bool = False,
    after: int = -1,
) -> AsyncIterator[bytes]:
    def chunk(delta: ChunkDelta, finish: str | None = None) -> bytes:
        c = ChatCompletionChunk(
            completion_id, "chat.completion.chunk", created, model, [ChunkChoice(0, delta, finish)]
        )
        return b"data: " + _encode(c) + b"\n\n"

    def error(kind: str, message: str) -> bytes:
        return b"data: " + _encode({"error": {"type": kind, "message": message}}) + b"\n\n"

    yield chunk(ChunkDelta(role="assistant", content=""))
    said = _Said()
    deadline = time.monotonic() + wait_s
    ended: RunRecord | None = None
    events = live_events(gw.store, run_id, after, tokens)
    try:
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    item = await anext(events)
            except (StopAsyncIteration, TimeoutError):
                break
            if isinstance(item, list):  # token deltas: one chunk each, as they came
                void = next((d.step for d in item if d.reset and said.spoke_at(d.step)), None)
                yield b"".join(
                    chunk(ChunkDelta(content=said.piece(d.step, d.content)))
                    for d in item
                    if d.content and (void is None or d.step < void)
                )
                if void is not None:
                    # The step's model call started again (another backend, another
                    # worker) after some of its text was sent: an OpenAI stream cannot
                    # take text back, so it ends in an error the SDK raises, never with
                    # two generations spliced into one answer.
                    yield error("stream_reset", _reset_message(run_id))
                    yield b"data: [DONE]\n\n"
                    return
            elif isinstance(item, tuple):
                entry = item[1]
                if isinstance(entry, ModelTurn | StepRecord) and not structured:
                    rest = said.rest(entry.step, entry.message.content)
                    if rest:
                        yield chunk(ChunkDelta(content=said.piece(entry.step, rest)))
                elif isinstance(entry, RunFinished | ApprovalRequested):
                    break  # it ended, or it waits for a human: no more text is coming
            elif isinstance(item, RunRecord):  # it ended without a final entry
                ended = item
                break
            else:
                yield item  # a keep-alive comment (the OpenAI SDK skips comments)
        record = ended or await gw.wait(run_id, 0)
    except _WAIT_ERRORS as exc:
        # The store stayed away past the wait's grace (or lost the run): headers are
        # sent, so the failure travels in-band like any other.
        message = exc.message if isinstance(exc, ApiError) else "the run store is unreachable"
        yield error("unavailable", f"run {run_id}: {message}")
        yield b"data: [DONE]\n\n"
        return
    finally:
        await events.aclose()
    calls = await _client_calls(gw, record) if record.status == "waiting" else []
    if calls:  # the client's tools to run: their calls, as OpenAI streams them
        yield chunk(ChunkDelta(tool_calls=[
            ChunkToolCall(i, c.id, "function", FunctionOut(c.name, c.arguments))
            for i, c in enumerate(calls)
        ]))
        yield chunk(ChunkDelta(), "tool_calls")
    elif record.status == "completed":
        if structured and record.output:
            yield chunk(ChunkDelta(content=record.output))
        yield chunk(ChunkDelta(), "stop")
    elif record.status == "waiting":
        yield error("run_waiting", run_waiting(run_id))
    elif not record.done:  # the wait timed out, as a 504 "timeout" would say unstreamed
        yield error("timeout", run_still_going(run_id, wait_s))
    else:
        # Headers are sent: the failure travels in-band, as OpenAI's own streams do.
        why = record.error or record.reason or record.status
        yield error("run_failed", f"run {run_id} {record.status}: {why}")
    if include_usage:
        usage = ChatCompletionChunk(
            completion_id, "chat.completion.chunk", created, model, [], _usage(record)
        )
        yield b"data: " + _encode(usage) + b"\n\n"
    yield b"data: [DONE]\n\n"
