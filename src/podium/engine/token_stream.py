"""The model call of a step that someone listens to: streamed, each delta published.

The engine takes this path only when its token channel says the run has a
listener (one test per step); otherwise the step calls :meth:`Model.request`.
Deltas are published, not journaled: the step's journal entry holds the whole
reply, as for a call that was not streamed. Each carries its offset in the text
the call streamed, so that listeners drop what a call made again (after a
malformed reply, or on another worker after this one died) sends a second time.
A model that cannot stream is asked with :meth:`Model.request` instead, and its
listeners see the reply when the step is journaled.
"""

from __future__ import annotations

import time

import msgspec

from podium.agent import Agent
from podium.engine.model_faults import model_fault
from podium.engine.stopwatch import Stopwatch
from podium.engine.stream_scrub import HeldText
from podium.errors import ModelError, ModelReplyError
from podium.models.base import Model, ModelRequest, ModelResponse, StreamDelta
from podium.security.redact import RunRedactor
from podium.security.secrets import SecretMatcher
from podium.streaming.base import TokenChannel, TokenDelta, delta_size

__all__ = ("stream_model",)


async def stream_model(
    agent: Agent,
    request: ModelRequest,
    sw: Stopwatch,
    channel: TokenChannel,
    phase: int,
    redact: RunRedactor | None = None,
) -> ModelResponse:
    """The model's reply to ``request``, its deltas published on ``channel`` as they come.

    A malformed reply is asked again up to ``agent.model_retries`` times, as for
    an unstreamed call (its deltas start again at offset 0: listeners drop the text
    they have had already).
    CPU is counted only over the slices that handle a delta, not while waiting.
    A run with secrets (``redact``) streams no argument fragments (the journal
    replaces secret arguments; its listeners must not see them either), and its text
    is held back just long enough to scrub the secrets it knows (see
    :mod:`podium.engine.stream_scrub`).
    """
    arguments = redact is None
    attempt = 0
    while True:
        try:
            return await _stream_once(
                agent.model, request, sw, channel, phase, arguments, redact
            )
        except ModelReplyError:
            if attempt >= agent.model_retries:
                raise
            attempt += 1
        except (ModelError, OSError):  # a backend's failure; a service away (the channel's)
            raise
        except Exception as exc:  # a bug in the model's code
            raise model_fault(agent.model, exc) from exc


async def _stream_once(
    model: Model,
    request: ModelRequest,
    sw: Stopwatch,
    channel: TokenChannel,
    phase: int,
    arguments: bool,
    redact: RunRedactor | None,
) -> ModelResponse:
    try:
        stream = model.stream(request)
    except NotImplementedError:
        return await _unstreamed(model, request, sw, phase)
    run_id, step = request.run_id, request.step
    publish = channel.publish
    t0 = time.perf_counter()
    first: float | None = None
    response: ModelResponse | None = None
    offset = 0  # where the next delta starts in the text this call streamed
    matcher = None if redact is None else redact.matcher  # (the secrets known as it starts)
    held = None if not matcher else (HeldText(), HeldText())  # content, reasoning
    # Every streamed call starts with a reset: a call made again (a malformed reply, a
    # worker that died mid-stream) must not be spliced onto what listeners already had.
    publish(run_id, TokenDelta(step, reset=True))
    sw.suspend(phase)
    try:
        async for delta in stream:
            sw.resume(phase)
            if delta.response is not None:
                response = delta.response
                break
            if delta.reset:  # the model call started again (a pool failed it over)
                offset = 0
                if held is not None:
                    held = (HeldText(), HeldText())
                publish(run_id, TokenDelta(step, reset=True))
                sw.suspend(phase)
                continue
            if first is None:
                first = time.perf_counter()
            if held is not None:
                assert matcher is not None
                delta = _scrubbed(delta, held, matcher)
            if (
                delta.content
                or delta.reasoning
                or delta.tool_name
                or (delta.arguments and arguments)
            ):
                token = _token(step, delta, arguments, offset)
                offset += delta_size(token)
                publish(run_id, token)
            sw.suspend(phase)
        else:
            sw.resume(phase)
    except NotImplementedError:  # a wrapper whose backend cannot stream, found on first read
        sw.resume(phase)
        if first is not None:
            raise
        return await _unstreamed(model, request, sw, phase)
    except BaseException:
        sw.resume(phase)
        raise
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    if response is None:
        raise ModelReplyError(f"{model.name}: the stream ended without a reply")
    if held is not None:  # the tail held back for a secret that might have begun in it
        assert matcher is not None
        rest = StreamDelta(content=held[0].flush(matcher), reasoning=held[1].flush(matcher))
        if rest.content or rest.reasoning:
            token = _token(step, rest, arguments, offset)
            offset += delta_size(token)
            publish(run_id, token)
    sw.suspend(phase)
    try:
        await channel.flush()  # the step's journal entry must not overtake its last tokens
    finally:
        sw.resume(phase)
    if response.ttft_s is None and first is not None:
        response.ttft_s = first - t0
    return response


def _scrubbed(
    delta: StreamDelta, held: tuple[HeldText, HeldText], matcher: SecretMatcher
) -> StreamDelta:
    """``delta`` as it may go out: its text through the hold-back windows; a tool call's
    delta first lets out what was held (the stream's order is kept)."""
    if delta.tool_name is not None or delta.tool_call_index is not None:
        content, reasoning = held[0].flush(matcher), held[1].flush(matcher)
        return msgspec.structs.replace(
            delta, content=content + delta.content, reasoning=reasoning + delta.reasoning
        )
    return msgspec.structs.replace(
        delta,
        content=held[0].push(delta.content, matcher) if delta.content else "",
        reasoning=held[1].push(delta.reasoning, matcher) if delta.reasoning else "",
    )


def _token(step: int, delta: StreamDelta, arguments: bool, offset: int) -> TokenDelta:
    return TokenDelta(
        step,
        delta.content,
        delta.reasoning,
        delta.tool_call_index,
        delta.tool_name,
        delta.arguments if arguments else "",
        offset,
    )


async def _unstreamed(
    model: Model, request: ModelRequest, sw: Stopwatch, phase: int
) -> ModelResponse:
    sw.suspend(phase)
    try:
        return await model.request(request)
    finally:
        sw.resume(phase)
