"""The built-in simulated model: scripted replies with a GPU-like latency model.

It follows a :class:`Scenario` (which tool calls to make at each step, then a
final answer) or a policy function over the request, and answers after a
latency drawn from a :class:`LatencyModel`: time to first token, prefill time
for prompt tokens the (simulated) prefix cache does not hold, and a time per
output token, with fixed or log-normal jitter. Beyond ``capacity`` concurrent
sequences requests queue, as they do on a real inference server. This is what
makes load tests and capacity planning possible without a GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import msgspec

from podium.errors import ConfigError
from podium.messages import ToolCall, Usage
from podium.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    OutputMode,
    OutputSchema,
    StreamDelta,
)
from podium.models.schema_example import example_value

__all__ = ("LatencyModel", "Scenario", "SimStep", "SimToolCall", "SimulatedModel")

_json_encode = msgspec.json.encode
#: A streamed token: a word with the spaces before it (or trailing spaces).
_TOKEN = re.compile(r"\s*\S+|\s+")
#: Characters of a tool call's arguments per streamed piece.
_ARGUMENT_PIECE = 8


def _pieces(reply: ModelResponse) -> list[StreamDelta]:
    """The deltas a streaming server would send for ``reply`` (without the last one)."""
    pieces = [StreamDelta(content=t) for t in _TOKEN.findall(reply.content)]
    for i, call in enumerate(reply.tool_calls):
        pieces.append(StreamDelta(tool_call_index=i, tool_call_id=call.id, tool_name=call.name))
        args = call.arguments
        pieces.extend(
            StreamDelta(tool_call_index=i, arguments=args[j : j + _ARGUMENT_PIECE])
            for j in range(0, len(args), _ARGUMENT_PIECE)
        )
    return pieces


class LatencyModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How long a simulated backend takes for one call.

    latency = ttft + prefill_per_token × uncached prompt tokens
              + per_output_token × output tokens, times a jitter factor.
    With ``jitter="lognormal"`` the factor is exp(N(-σ²/2, σ)), whose mean is 1.
    """

    ttft_s: float = 0.0
    per_token_s: float = 0.0
    prefill_per_token_s: float = 0.0
    jitter: Literal["none", "lognormal"] = "none"
    sigma: float = 0.25

    @property
    def instant(self) -> bool:
        return self.ttft_s == 0.0 and self.per_token_s == 0.0 and self.prefill_per_token_s == 0.0

    def sample(self, rng: random.Random, output_tokens: int, uncached_tokens: int = 0) -> float:
        base = (
            self.ttft_s
            + self.prefill_per_token_s * uncached_tokens
            + self.per_token_s * output_tokens
        )
        if self.jitter == "lognormal" and base > 0.0:
            base *= math.exp(rng.gauss(-self.sigma * self.sigma / 2, self.sigma))
        return base


class SimToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool call the simulated model makes.

    ``arguments`` is a mapping (encoded to JSON) or a raw string, which may be
    deliberately invalid to exercise validation.
    """

    name: str
    arguments: dict[str, Any] | str = {}


class SimStep(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the simulated model says at one step."""

    tool_calls: tuple[SimToolCall, ...] = ()
    content: str = ""


class Scenario(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A script: the tool calls of each step in order, then the final answer.

    When the request asks for structured output (an agent with an ``output_type``), the
    final answer is ``output`` (the value, as JSON: a dict for a Struct) or, when that is
    None, a value built from the requested schema; it is the reply's content (native
    mode) or a call to the final-answer tool (tool mode). A step's own ``content`` is
    sent as it is, which is how a script gives a wrong answer first.
    """

    steps: tuple[SimStep, ...] = ()
    final: str = "Done."
    output_tokens: int | None = None
    output: Any = None

    def __post_init__(self) -> None:
        for step in self.steps:
            if not isinstance(step, SimStep):  # decoding checks this; a constructor does not
                raise ConfigError(f"a Scenario's steps are SimStep(...), not {step!r}")
            for call in step.tool_calls:
                if not isinstance(call, SimToolCall):
                    raise ConfigError(f"a SimStep's tool_calls are SimToolCall(...), not {call!r}")

    @classmethod
    def react(
        cls,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        tool_steps: int = 6,
        parallel: int = 1,
        final: str = "Done.",
    ) -> Scenario:
        """``tool_steps`` steps each calling ``tool`` (``parallel`` times), then ``final``."""
        call = SimToolCall(tool, arguments or {})
        return cls(
            steps=tuple(SimStep(tool_calls=(call,) * parallel) for _ in range(tool_steps)),
            final=final,
        )


Policy = Callable[
    [ModelRequest], "SimStep | ModelResponse | str | Awaitable[SimStep | ModelResponse | str]"
]


class SimulatedModel(Model):
    """A scripted model with a latency model and a capacity.

    Example::

        model = SimulatedModel(
            Scenario.react("lookup", {"q": "podium"}, tool_steps=3),
            latency=LatencyModel(ttft_s=0.05, per_token_s=0.002, jitter="lognormal"),
            capacity=64,
        )
    """

    def __init__(
        self,
        scenario: Scenario | Policy | None = None,
        *,
        latency: LatencyModel | None = None,
        capacity: int | None = None,
        seed: int | None = None,
        name: str = "simulated",
        cache_entries: int = 10_000,
        structured_output: OutputMode = "native",
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ConfigError("capacity must be at least 1 (or None for unbounded)")
        if scenario is not None and not isinstance(scenario, Scenario) and not callable(scenario):
            raise ConfigError(
                f"SimulatedModel takes a Scenario or a policy function, not {scenario!r} "
                "(a fixed answer: SimulatedModel(Scenario(final=...)))"
            )
        self.name = name
        #: It honours both ways of asking for structured output; this says which agents pick.
        self.structured_output = structured_output
        self.scenario = scenario if scenario is not None else Scenario()
        self.latency = latency or LatencyModel()
        self.capacity = capacity
        self._instant = self.latency.instant and capacity is None
        self._rng = random.Random(seed)
        self._slots: asyncio.Semaphore | None = None
        self._cached_prompt: dict[str, int] = {}
        self._cache_entries = cache_entries
        self._final_step = (
            SimStep(content=self.scenario.final)
            if isinstance(self.scenario, Scenario)
            else SimStep()
        )
        self._rendered: dict[tuple[int, int], tuple[SimStep, tuple[ToolCall, ...], int]] = {}
        self._answers: dict[int, tuple[OutputSchema, SimStep]] = {}
        self.running = 0
        self.peak_running = 0
        self.calls = 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        # Inline rather than through _decide and _reply: a scripted step, rendered already,
        # is every instant step's path in benchmarks (no frame but this one).
        scenario = self.scenario
        index = request.step
        step: SimStep | ModelResponse | str
        if type(scenario) is Scenario and index < len(scenario.steps):
            step = scenario.steps[index]
        else:
            decided = self._decide(request)
            if isinstance(decided, (SimStep, ModelResponse, str)):
                step = decided
            else:
                step = await decided
        if isinstance(step, ModelResponse):
            return step
        if isinstance(step, str):
            step = SimStep(content=step)
        rendered = self._rendered.get((index, id(step)))  # (_render's cache)
        if rendered is not None and rendered[0] is step:
            calls, out_tokens = rendered[1], rendered[2]
        else:
            calls, out_tokens = self._render(index, step)
        cached = self._remember_prompt(request)
        usage = Usage(request.prompt_tokens, out_tokens, cached, 1)
        reply = ModelResponse(
            content=step.content,
            tool_calls=calls,
            usage=usage,
            finish_reason="tool_calls" if calls else "stop",
            model=self.name,
            backend=self.name,
        )
        if self._instant:
            return reply
        await self._serve(out_tokens, request.prompt_tokens - cached)
        return reply

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        """The reply token by token: the first after the time to first token (and the
        prefill), the others spread evenly over the rest of the sampled latency.

        A token is a word with the spaces before it; a tool call streams its name,
        then its arguments in pieces. The whole stream takes as long as
        :meth:`request` would, and holds a capacity slot throughout.
        """
        self.calls += 1
        step = self._decide(request)
        if not isinstance(step, (SimStep, ModelResponse, str)):
            step = await step
        if isinstance(step, ModelResponse):  # the policy's own reply: as it is, no latency
            reply, out_tokens, uncached = step, 0, 0
        else:
            reply, out_tokens, uncached = self._reply(request, step)
        pieces = _pieces(reply)
        if self._instant or reply is step:
            for piece in pieces:
                yield piece
            yield StreamDelta(response=reply)
            return
        latency = self.latency
        first = latency.ttft_s + latency.prefill_per_token_s * uncached
        rest = latency.per_token_s * out_tokens
        planned = first + rest
        total = latency.sample(self._rng, out_tokens, uncached)
        scale = total / planned if planned > 0 else 1.0
        gap = rest * scale / max(1, len(pieces) - 1)
        async with self._slot():
            await asyncio.sleep(first * scale)
            reply.ttft_s = first * scale
            for i, piece in enumerate(pieces):
                if i:
                    await asyncio.sleep(gap)
                yield piece
            if len(pieces) < 2:
                await asyncio.sleep(rest * scale)
        yield StreamDelta(response=reply)

    def _reply(self, request: ModelRequest, step: SimStep | str) -> tuple[ModelResponse, int, int]:
        """The reply to ``step``, its output tokens and the prompt tokens not cached."""
        if isinstance(step, str):
            step = SimStep(content=step)
        calls, out_tokens = self._render(request.step, step)
        cached = self._remember_prompt(request)
        usage = Usage(request.prompt_tokens, out_tokens, cached, 1)
        reply = ModelResponse(
            content=step.content,
            tool_calls=calls,
            usage=usage,
            finish_reason="tool_calls" if calls else "stop",
            model=self.name,
            backend=self.name,
        )
        return reply, out_tokens, request.prompt_tokens - cached

    async def _serve(self, out_tokens: int, uncached: int) -> None:
        """Hold a slot (queueing past capacity) for the sampled latency."""
        delay = self.latency.sample(self._rng, out_tokens, uncached)
        if self.capacity is None:
            await asyncio.sleep(delay)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        async with self._slots:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                await asyncio.sleep(delay)
            finally:
                self.running -= 1

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of ``capacity`` sequences (queueing past it), held for a whole stream."""
        if self.capacity is None:
            yield
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        async with self._slots:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                yield
            finally:
                self.running -= 1

    def _decide(
        self, request: ModelRequest
    ) -> SimStep | ModelResponse | str | Awaitable[SimStep | ModelResponse | str]:
        scenario = self.scenario
        if isinstance(scenario, Scenario):
            if request.step < len(scenario.steps):
                return scenario.steps[request.step]
            output = request.settings.output
            if output is not None:
                return self._answer(output, scenario.output)
            return self._final_step
        return scenario(request)

    def _answer(self, output: OutputSchema, value: Any) -> SimStep:
        """The structured final answer asked for by ``output`` (built once per schema)."""
        hit = self._answers.get(id(output))
        if hit is not None and hit[0] is output:
            return hit[1]
        if value is None:
            payload = example_value(output.schema)
        else:
            payload = {output.key: value} if output.key is not None else value
        text = _json_encode(payload).decode()
        if output.mode == "tool":
            step = SimStep(tool_calls=(SimToolCall(output.name, text),))
        else:
            step = SimStep(content=text)
        self._answers[id(output)] = (output, step)  # holding the schema keeps its id unique
        return step

    def _render(self, index: int, step: SimStep) -> tuple[tuple[ToolCall, ...], int]:
        """The step's tool calls as the wire would carry them, and its output tokens.

        Scripted steps are rendered once and reused: the simulated server's own
        cost should not weigh on the client it stands in front of.
        """
        key = (index, id(step))
        cached = self._rendered.get(key)
        if cached is not None and cached[0] is step:
            return cached[1], cached[2]
        calls = tuple(
            ToolCall(
                f"call_{index}_{i}",
                c.name,
                c.arguments if isinstance(c.arguments, str) else _json_encode(c.arguments).decode(),
            )
            for i, c in enumerate(step.tool_calls)
        )
        if isinstance(self.scenario, Scenario) and self.scenario.output_tokens is not None:
            out_tokens = self.scenario.output_tokens
        else:
            chars = len(step.content) + sum(len(c.name) + len(c.arguments) for c in calls)
            out_tokens = max(1, chars // 4)
        if isinstance(self.scenario, Scenario):
            self._rendered[key] = (step, calls, out_tokens)
        return calls, out_tokens

    def _remember_prompt(self, request: ModelRequest) -> int:
        """Prompt tokens a prefix cache would hold: this run's previous prompt, or the prefix."""
        if not request.run_id:
            return 0
        cache = self._cached_prompt
        previous = cache.pop(request.run_id, request.prefix_tokens)
        cache[request.run_id] = request.prompt_tokens
        if len(cache) > self._cache_entries:  # dicts keep insertion order: evict the oldest
            del cache[next(iter(cache))]
        return previous if previous < request.prompt_tokens else request.prompt_tokens
