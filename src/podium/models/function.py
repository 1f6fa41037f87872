"""``FunctionModel``: a reply computed by your function, for testing agents."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from podium.errors import ConfigError, ModelError
from podium.messages import Message, ToolCall, Usage
from podium.models.base import Model, ModelRequest, ModelResponse, OutputMode

__all__ = ("FunctionModel", "ReplyFunction", "tool_call_reply")

#: A reply's usage until its model call fills it in (frozen: one shared instance).
_NO_USAGE = Usage()

ReplyFunction = Callable[
    [Sequence[Message], ModelRequest],
    "ModelResponse | str | Awaitable[ModelResponse | str]",
]


def tool_call_reply(
    *calls: tuple[str, str | Mapping[str, Any]], content: str = ""
) -> ModelResponse:
    """A reply that calls tools, each given as ``(name, arguments)``: the arguments as
    JSON text (``'{"q": "x"}'``, as a model sends them) or a dict (encoded here)."""
    # The usual reply, one call with JSON text, is checked in C and made with no frame (a
    # reply function runs at every step of a test or benchmark).
    made: tuple[ToolCall, ...] | None = None
    if len(calls) == 1:
        call = calls[0]
        if type(call) is tuple and len(call) == 2:
            name, arguments = call
            if type(name) is str and type(arguments) is str:
                made = (ToolCall("call_0", name, arguments),)
    if made is None:
        made = tuple([_tool_call(i, call) for i, call in enumerate(calls)])
    # (positional: content, reasoning, tool_calls, usage, finish_reason; no keywords to match)
    return ModelResponse(content, "", made, _NO_USAGE, "tool_calls")


def _tool_call(i: int, call: object) -> ToolCall:
    """Call ``i`` of :func:`tool_call_reply`, checked: ``(name, arguments)``."""
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], str)):
        raise TypeError(
            f"tool_call_reply: call {i} is {call!r:.80}; give (name, arguments), e.g. "
            '("lookup", {"q": "x"})'
        )
    name, args = call
    # JSON text first: a str check is one C test, where `Mapping` is an ABC whose check
    # costs more than the rest of a call here.
    if not isinstance(args, str):
        if not isinstance(args, Mapping):
            raise TypeError(
                f"tool_call_reply: the arguments of {name!r} are {type(args).__name__}; "
                "give JSON text or a dict"
            )
        args = msgspec.json.encode(args).decode()
    return ToolCall(_CALL_IDS[i] if i < len(_CALL_IDS) else f"call_{i}", name, args)


#: The ids of a reply's first calls, made once (``call_0``, ``call_1``, …).
_CALL_IDS = tuple(f"call_{i}" for i in range(8))


class FunctionModel(Model):
    """A model whose reply is ``fn(messages, request)`` (sync or async).

    Return a string for a final answer, or a :class:`ModelResponse` (see
    :func:`tool_call_reply`) to call tools; anything else fails the run with reason
    ``model_error``. Example::

        def reply(messages, request):
            if messages[-1].role == "tool":
                return f"The tool said {messages[-1].content}"
            return tool_call_reply(("lookup", '{"q": "x"}'))

        agent = Agent("t", FunctionModel(reply), tools=[lookup])
    """

    def __init__(
        self,
        fn: ReplyFunction,
        *,
        name: str | None = None,
        structured_output: OutputMode = "native",
    ) -> None:
        _check_arity(fn)
        self.fn = fn
        #: How agents with an ``output_type`` ask it: ``"native"``, the function returns the
        #: JSON text; ``"tool"``, it calls ``final_result`` (``request.settings.output``).
        self.structured_output = structured_output
        self.name = name or f"function:{getattr(fn, '__name__', 'fn')}"
        self._is_async = inspect.iscoroutinefunction(fn)

    @classmethod
    def script(
        cls, replies: Sequence[ModelResponse | str], *, name: str = "script"
    ) -> FunctionModel:
        """A model that answers step ``n`` of every run with ``replies[n]``: a test's whole
        conversation written out in order. A run asking for more steps fails with reason
        ``model_error``, naming the script's length. Example::

            model = FunctionModel.script([
                tool_call_reply(("get_order", {"order_id": "A-1"})),
                "Order A-1 has shipped.",
            ])

        By step, not by call: concurrent runs, and a run resumed after a crash, each get
        the same reply at the same step.
        """
        if isinstance(replies, (str, ModelResponse)) or not isinstance(replies, Sequence):
            raise ConfigError(
                "FunctionModel.script takes a list of replies (str or ModelResponse), "
                f"not {replies!r:.60}"
            )
        script = tuple(replies)
        for i, reply in enumerate(script):
            if not isinstance(reply, (str, ModelResponse)):
                raise ConfigError(
                    f"FunctionModel.script: reply {i} is {reply!r:.60}; give a str (an "
                    "answer) or a ModelResponse (tool_call_reply(...) to call tools)"
                )

        def scripted(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step >= len(script):
                raise ModelError(
                    f"{name}: the script has {len(script)} replies; step {request.step} "
                    "asked for one more"
                )
            reply = script[request.step]
            # A copy: the engine fills in a reply's usage, which is each call's own.
            return reply if isinstance(reply, str) else msgspec.structs.replace(reply)

        return cls(scripted, name=name)

    async def request(self, request: ModelRequest) -> ModelResponse:
        result = self.fn(request.messages, request)
        # The usual reply, a ModelResponse, is told by one test in C: ``inspect.isawaitable``
        # is a Python function with an ABC check, and this runs at every step of a test or
        # benchmark.
        if type(result) is not ModelResponse:
            if not isinstance(result, (str, ModelResponse)) and inspect.isawaitable(result):
                result = await result
            if isinstance(result, str):
                result = ModelResponse(content=result)
            elif not isinstance(result, ModelResponse):
                raise ModelError(
                    f"{self.name}: the reply function returned {result!r:.80}; return a str "
                    "(the final answer) or a ModelResponse (tool_call_reply(...) to call tools)"
                )
        if result.usage.requests == 0:
            result.usage = Usage(request.prompt_tokens, len(result.content) // 4 or 1, 0, 1)
        if not result.model:
            result.model = self.name
        return result


def _check_arity(fn: object) -> None:
    """Refuse at construction what could not be called as ``fn(messages, request)``."""
    if not callable(fn):
        raise ConfigError(f"FunctionModel takes a function fn(messages, request), not {fn!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or extension callable: nothing to read
        return
    try:
        signature.bind(None, None)
    except TypeError:
        what = getattr(fn, "__name__", type(fn).__name__)
        raise ConfigError(
            f"FunctionModel calls fn(messages, request); {what}{signature} cannot take "
            "those two arguments"
        ) from None
