"""The model-backend interface: one required async method.

A backend turns a :class:`ModelRequest` into a :class:`ModelResponse`.
Streaming is optional: a backend that cannot stream raises
``NotImplementedError`` naming its class. Lifecycle is ``async with``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import msgspec

from podium.lifecycle import AsyncCloseable
from podium.messages import Message, ToolCall, Usage

__all__ = (
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputMode",
    "OutputSchema",
    "StreamDelta",
    "ToolDefinition",
)


class ToolDefinition(msgspec.Struct, frozen=True, gc=False):
    """A tool as the model sees it: name, description, JSON Schema of the arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


#: How a model is asked for a structured answer: ``"native"`` sends the JSON Schema as
#: OpenAI's ``response_format`` (the server constrains the reply: vLLM, SGLang, llama.cpp,
#: Ollama, OpenAI); ``"tool"`` offers a final-answer tool whose arguments are the answer.
OutputMode = Literal["native", "tool"]


class OutputSchema(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """The structured answer a request asks for (set by ``Agent(output_type=...)``).

    ``mode="native"``: a backend that can sends ``schema`` as ``response_format``
    (``json_schema`` named ``name``) and the reply's content is the JSON. ``mode="tool"``:
    the request's tools include one named ``name`` whose arguments are the answer.
    ``key`` is set when the output type is not a JSON object (a list, a string…): the
    schema is then an object holding the value under that property.
    """

    name: str
    schema: dict[str, Any]
    mode: OutputMode = "native"
    description: str = ""
    key: str | None = None
    strict: bool | None = None


class ModelSettings(msgspec.Struct, frozen=True, omit_defaults=True):
    """Sampling and server options passed through to the backend.

    ``extra_body`` is merged into the request body as-is: vLLM/SGLang options
    (``top_k``, ``guided_json``…), llama.cpp's ``cache_prompt``, Ollama's
    ``options``.

    ``tool_choice`` is sent as OpenAI's ``tool_choice`` whenever the request
    offers tools: ``"auto"``, ``"required"`` (a tool call is mandatory),
    ``"none"``, or the name of one tool to force. Some servers (llama.cpp with
    some templates) emit tool calls only when asked this way.

    ``output`` is the structured answer asked for; :class:`~podium.agent.Agent` sets it
    from its ``output_type`` (one object per agent, so backends encode it once).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    extra_body: dict[str, Any] | None = None
    tool_choice: str | None = None
    output: OutputSchema | None = None


class ModelRequest(msgspec.Struct, gc=False):
    """Everything a backend needs for one call.

    ``messages`` starts with the agent's cached prefix (the system message)
    and continues with the run's append-only history, so consecutive calls of
    one run share their longest possible prefix. Backends must not mutate it.

    ``run_id``, ``prompt_tokens``, ``tags`` and ``attained_service_s`` are
    scheduling hints: session affinity, size-based routing, and
    least-attained-service ordering when backends are saturated.
    """

    messages: Sequence[Message]
    tools: tuple[ToolDefinition, ...] = ()
    settings: ModelSettings = ModelSettings()
    run_id: str = ""
    agent: str = ""
    step: int = 0
    prompt_tokens: int = 0
    prefix_tokens: int = 0
    tags: tuple[str, ...] = ()
    attained_service_s: float = 0.0


class ModelResponse(msgspec.Struct, gc=False):
    """A backend's reply.

    ``cpu_ns`` is the CPU the client itself spent on this call (encoding,
    decoding), for the backend's own statistics; the engine measures the loop
    thread's CPU around the call itself and does not add it again.
    ``ttft_s`` is the time to first token when streamed (reasoning tokens
    count: they are the first tokens a reasoning model produces).
    ``reasoning`` is the model's reasoning text (``reasoning_content``), kept
    apart from the answer. ``usage_estimated`` is true when the server sent no
    usage and the client counted the tokens itself.
    """

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"
    model: str = ""
    backend: str = ""
    cpu_ns: int = 0
    ttft_s: float | None = None
    token_times_s: tuple[float, ...] = ()
    usage_estimated: bool = False


class StreamDelta(msgspec.Struct, gc=False, omit_defaults=True):
    """One piece of a streamed reply. The last delta carries ``response``.

    ``reset`` (no text) says the call started again from its beginning (a pool moved it
    to another backend mid-stream): what came before it is not part of the reply, and a
    caller that passed it on must tell its own listeners to discard it.
    """

    content: str = ""
    reasoning: str = ""
    tool_call_index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: str = ""
    response: ModelResponse | None = None
    reset: bool = False


class Model(AsyncCloseable, abc.ABC):
    """A model backend.

    Subclasses implement :meth:`request`. Example::

        class EchoModel(Model):
            name = "echo"

            async def request(self, request: ModelRequest) -> ModelResponse:
                return ModelResponse(content=request.messages[-1].content)
    """

    name: str = "model"
    #: The GenAI provider its calls go to, as traces name it (``gen_ai.provider.name``):
    #: one of the OpenTelemetry GenAI conventions' well-known values (``"openai"``,
    #: ``"anthropic"``, ``"azure.ai.openai"``…) when one applies. ``"podium"``, the
    #: default, is a model that answers inside this process (the simulated and
    #: function-backed ones); a backend of your own says which provider it calls.
    provider: str = "podium"
    #: The model its calls ask for, as traces name it (``gen_ai.request.model``, and the
    #: ``chat {model}`` span): the id sent to the backend where there is one (an
    #: OpenAI-compatible endpoint's ``model``); else, None, the model's :attr:`name`.
    request_model: str | None = None

    @property
    def traced_model(self) -> str:
        """:attr:`request_model`, or :attr:`name` when it has none."""
        return self.request_model or self.name
    #: How this backend is asked for structured output (see :data:`OutputMode`): a
    #: backend that may not know ``response_format`` gets a final-answer tool.
    structured_output: OutputMode = "tool"

    @abc.abstractmethod
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer one request."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        """Answer one request as a stream of deltas; the last one holds the response."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    async def aclose(self) -> None:
        """Release connections and background tasks."""
