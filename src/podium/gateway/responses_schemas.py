"""The bodies of OpenAI's Responses API as the gateway speaks it (``/v1/responses``).

Shapes follow the ``openai`` SDK's ``openai.types.responses`` (``Response``,
``ResponseOutputMessage``, ``ResponseFunctionToolCall``, ``McpCall``, ``ResponseUsage``).
The request accepts and ignores fields of OpenAI's API Podium has no use for
(``reasoning``, ``include``, ``truncation``, ``prompt_cache_key``…), as the chat facade
does: clients send them by default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from podium.gateway.schemas import Name, Probability, Temperature, TokenBudget

__all__ = (
    "FunctionCallItem",
    "McpCallItem",
    "MessageItem",
    "OutputItem",
    "OutputText",
    "ResponseError",
    "ResponseObject",
    "ResponseUsage",
    "ResponsesRequest",
)

#: A response id as the gateway makes them (``resp_`` and a run's hex id, ``_STEP`` after
#: a client's tool outputs resumed the run); anything else is a 404, not a 422.
ResponseId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/responses``: ``model`` names the agent; ``input`` is a string or a list of
    items (messages, ``function_call``, ``function_call_output``)."""

    model: Name
    input: str | list[Any] = ""
    instructions: str | None = None
    previous_response_id: ResponseId | None = None
    store: bool = True
    stream: bool = False
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    max_output_tokens: TokenBudget | None = None
    text: dict[str, Any] | None = None


class OutputText(msgspec.Struct):
    text: str
    type: Literal["output_text"] = "output_text"
    annotations: list[Any] = []
    logprobs: list[Any] = []


ItemStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class MessageItem(msgspec.Struct, tag="message", tag_field="type"):
    id: str
    status: ItemStatus
    content: list[OutputText]
    role: Literal["assistant"] = "assistant"


class FunctionCallItem(msgspec.Struct, tag="function_call", tag_field="type"):
    """A call of one of the client's tools: the client runs it, and sends its output back
    as a ``function_call_output`` item with this ``call_id``."""

    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class McpCallItem(msgspec.Struct, tag="mcp_call", tag_field="type", omit_defaults=True):
    """A call of one of the agent's own tools, run on the server (shown, not for the client
    to run: OpenAI's item for a tool its server ran)."""

    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    status: ItemStatus = "completed"


OutputItem = MessageItem | FunctionCallItem | McpCallItem


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # (a backend's prompt cache writes: not reported to Podium)


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens_details: OutputTokensDetails


class ResponseError(msgspec.Struct):
    code: str
    message: str


class ResponseObject(msgspec.Struct):
    """A ``response`` (what ``client.responses.create`` returns)."""

    id: str
    created_at: float
    model: str
    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
    output: list[OutputItem]
    usage: ResponseUsage | None
    error: ResponseError | None = None
    incomplete_details: None = None
    instructions: str | None = None
    metadata: dict[str, str] = {}
    object: Literal["response"] = "response"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    tool_choice: Any = "auto"
    tools: list[Any] = []
    previous_response_id: str | None = None
    store: bool = True
    max_output_tokens: int | None = None
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
    truncation: Literal["disabled"] = "disabled"
