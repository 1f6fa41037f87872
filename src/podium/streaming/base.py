"""The token channel: a run's model tokens, live, from the engine to whoever listens.

Tokens are ephemeral: they are not journaled (the journal keeps whole model
turns), a listener gets those published after it subscribed, and nothing is
kept for a listener that comes later. The engine asks :meth:`TokenChannel.listening`
once per step, before the model call, and streams that call only when the
answer is yes: a run nobody listens to costs one dictionary test per step.

Two implementations: :class:`~podium.streaming.local.LocalTokenChannel` (the
engine and the gateway in one process) and
:class:`~podium.streaming.redis.RedisTokenChannel` (``podium worker`` processes
publishing to gateways elsewhere, over Redis pub/sub).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Sequence

import msgspec

from podium.lifecycle import AsyncCloseable

__all__ = ("StepOffsets", "TokenChannel", "TokenDelta", "TokenSubscription", "delta_size")

#: Deltas one listener may have waiting before the rest of that step is dropped for it.
DEFAULT_BUFFER = 4096


class TokenDelta(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A piece of the model's reply at ``step`` of a run, as it arrived from the backend.

    ``content`` and ``reasoning`` are text fragments; a tool call arrives as a delta
    with its ``tool_call_index`` and ``tool_name``, then fragments of its JSON
    ``arguments`` under the same index. ``offset`` is where the delta starts in the
    step's streamed text: the characters of content, reasoning, tool names and
    arguments the step's model call published before it (:func:`delta_size` each). A
    call made again (after its worker died, or a malformed reply) starts again from
    0, so a listener that has delivered the step up to some offset drops what lies
    below it (see :class:`StepOffsets`).

    ``reset`` (no text, offset 0) starts every streamed model call: the call begins (or
    begins again: another backend after a fail-over mid-stream, a malformed reply asked
    again, another worker after this one died) and what was streamed of ``step`` before
    it is not part of the reply. A listener that delivered some of the step passes the
    reset on (clients discard the step's text), one that delivered none drops it.
    """

    step: int
    content: str = ""
    reasoning: str = ""
    tool_call_index: int | None = None
    tool_name: str | None = None
    arguments: str = ""
    offset: int = 0
    reset: bool = False


def delta_size(delta: TokenDelta) -> int:
    """How far ``delta`` moves its step's offset: its text, and its tool name (a delta
    that only names a call has its place in the step's text too)."""
    name = delta.tool_name
    return (
        len(delta.content)
        + len(delta.reasoning)
        + len(delta.arguments)
        + (len(name) if name is not None else 0)
    )


class StepOffsets:
    """What a listener has delivered of each step's streamed text: drops the deltas, or
    the parts of deltas, that a re-run of the step's model call sends again.

    A delta that starts past what was delivered (some were lost, or the listener came in
    mid-step) is kept: the step's journaled model turn holds the whole text anyway.
    """

    __slots__ = ("_reached",)

    def __init__(self) -> None:
        self._reached: dict[int, int] = {}

    def unsent(self, deltas: Sequence[TokenDelta]) -> list[TokenDelta]:
        """``deltas`` without what was delivered already (counted as delivered now)."""
        reached = self._reached
        out: list[TokenDelta] = []
        for delta in deltas:
            step = delta.step
            got = reached.get(step, 0)
            if delta.reset:
                if got:  # the client has text of the step that is no longer the reply
                    reached[step] = 0
                    out.append(delta)
                continue
            end = delta.offset + delta_size(delta)
            if end <= got:
                continue  # delivered already: a model call made again streams it again
            if delta.offset < got:  # overlaps what was delivered: only its new end
                delta = _tail(delta, got - delta.offset)
            reached[step] = end
            out.append(delta)
        return out

    def forget(self, step: int) -> None:
        """Stop counting ``step`` (its model turn is journaled: its deltas are dropped)."""
        self._reached.pop(step, None)


def _tail(delta: TokenDelta, cut: int) -> TokenDelta:
    """``delta`` without its first ``cut`` characters, when it carries one kind of text
    (as backends send them); any other is kept whole."""
    size = delta_size(delta)
    for text, field in ((delta.content, "content"), (delta.reasoning, "reasoning"),
                        (delta.arguments, "arguments")):
        if text and len(text) == size:
            return msgspec.structs.replace(
                delta, **{field: text[cut:]}, offset=delta.offset + cut
            )
    return delta


class TokenSubscription:
    """One listener's deltas of one run, in order, as they arrive.

    Bounded: a listener that falls ``limit`` deltas behind loses the rest of that
    step (never a piece in the middle), so what it got of a step is always a prefix
    of the step's text, which the journaled model turn then completes. A reset of
    a step some of whose deltas came here voids those still buffered and is passed on
    (the listener discards what it took); a reset of any other step is dropped. Close
    it with :meth:`close` (synchronous, so it is safe in a cancelled task's cleanup).
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_fed_step",
        "_limit",
        "_on_close",
        "_skip_step",
        "_wake",
        "run_id",
    )

    def __init__(
        self,
        run_id: str,
        on_close: Callable[[TokenSubscription], None],
        limit: int = DEFAULT_BUFFER,
    ) -> None:
        self.run_id = run_id
        self._buffer: list[TokenDelta] = []
        self._wake = asyncio.Event()
        self._limit = limit
        self._skip_step = -1
        self._fed_step = -1  # the step of the last delta with text fed to it
        self._closed = False
        self._on_close = on_close

    def feed(self, deltas: Sequence[TokenDelta]) -> None:
        """Hand over deltas (the channel calls this; it never blocks)."""
        buffer = self._buffer
        for delta in deltas:
            if delta.reset:
                if delta.step != self._fed_step:
                    continue  # nothing of the step came here: nothing to discard
                # what is buffered of the step is void; a step cut short starts again
                buffer[:] = [d for d in buffer if d.step != delta.step]
                if self._skip_step == delta.step:
                    self._skip_step = -1
                buffer.append(delta)
                continue
            if delta.step == self._skip_step:
                continue
            self._fed_step = delta.step
            if len(buffer) >= self._limit:
                self._skip_step = delta.step  # drop the rest of this step, keep a prefix
                continue
            buffer.append(delta)
        if buffer:
            self._wake.set()

    def get_nowait(self) -> list[TokenDelta]:
        """The deltas that arrived since the last call (none: an empty list)."""
        out, self._buffer = self._buffer, []
        return out

    async def get(self) -> list[TokenDelta]:
        """The deltas that arrived since the last call, waiting for at least one."""
        while not self._buffer:
            self._wake.clear()
            await self._wake.wait()
        return self.get_nowait()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)


def drop_subscriber(subs: dict[str, list[TokenSubscription]], sub: TokenSubscription) -> bool:
    """Take ``sub`` out of ``subs`` (run id → its subscriptions); True when that left its
    run with none (the run's entry is then gone too)."""
    run_subs = subs.get(sub.run_id)
    if run_subs is None:
        return False
    if sub in run_subs:
        run_subs.remove(sub)
    if run_subs:
        return False
    del subs[sub.run_id]
    return True


class TokenChannel(AsyncCloseable, abc.ABC):
    """Where a run's token deltas go while someone listens.

    The engine calls :meth:`listening` and :meth:`publish` (both synchronous and
    cheap, never raising); the gateway calls :meth:`subscribe`.
    """

    @abc.abstractmethod
    def listening(self, run_id: str) -> bool:
        """Whether a listener of ``run_id`` is known (asked once per step)."""

    @abc.abstractmethod
    def publish(self, run_id: str, delta: TokenDelta) -> None:
        """Send ``delta`` to the run's listeners; never blocks (lost if nobody listens)."""

    @abc.abstractmethod
    async def subscribe(self, run_id: str) -> TokenSubscription:
        """Start listening to ``run_id``: deltas published from now on reach the result."""

    async def flush(self) -> None:
        """Wait until what was published so far has left (the engine calls it at the end
        of a streamed model call, so that no delta trails the step's journal entry)."""

    async def start(self) -> None:
        """Connect and start background tasks (a channel also starts on first use)."""
