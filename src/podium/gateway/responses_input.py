"""A Responses API request's ``input`` as Podium reads it: items to a transcript, and the
client's tool outputs that resume a run.

Messages (``role`` user, system, developer or assistant) with text content, the
``function_call`` and ``function_call_output`` items of earlier turns and the ``mcp_call``
items this server sent (the OpenAI Agents SDK sends a conversation's items back whole) are
read; ``reasoning`` and ``item_reference`` items are skipped; anything else (images,
files, other item types) is a 400 that says so, never dropped in silence.
"""

from __future__ import annotations

from typing import Any, cast

from podium.gateway.client_tools import parse_call_id
from podium.gateway.errors import ApiError
from podium.gateway.schemas import ChatMessage

__all__ = ("input_messages", "tool_outputs")

_ROLES = frozenset({"user", "system", "developer", "assistant"})
_SKIPPED = frozenset({"reasoning", "item_reference"})  # nothing for the agent to read


def _text(content: Any, at: str) -> str:
    """The text of an item's content: a string, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ApiError(400, "invalid_request", f"{at}: content is a string or a list of parts",
                       field="input")
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text"):
            raise ApiError(
                400, "unsupported_content",
                f"{at}: content parts of type {kind!r} are not supported (text only)",
                field="input",
            )
        texts.append(str(part.get("text") or ""))
    return "".join(texts)


def input_messages(items: list[Any]) -> list[ChatMessage]:
    """The input items as chat messages (the transcript a new run's input is made of)."""
    messages: list[ChatMessage] = []
    for i, item in enumerate(items):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, "invalid_request", f"{at} is not an object", field="input")
        kind = item.get("type") or ("message" if "role" in item else None)
        if not isinstance(kind, str):
            raise ApiError(400, "invalid_request", f"{at}: its type is a string",
                           field="input")
        if kind in _SKIPPED:
            continue
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise ApiError(400, "invalid_request", f"{at}: role {role!r} is not one of "
                               f"{', '.join(sorted(_ROLES))}", field="input")
            said = _text(item.get("content"), at)
            messages.append(ChatMessage(role=cast(Any, role), content=said))  # one of _ROLES
        elif kind == "function_call":
            said = f"(called {item.get('name')} with {item.get('arguments')})"
            messages.append(ChatMessage(role="assistant", content=said))
        elif kind in ("function_call_output", "mcp_call"):
            out = item.get("output")
            messages.append(ChatMessage(role="tool", content=_text(out, at)))
        else:
            raise ApiError(400, "unsupported_input",
                           f"{at}: items of type {kind!r} are not supported", field="input")
    return messages


def tool_outputs(items: list[Any]) -> list[tuple[str, str]]:
    """The trailing ``function_call_output`` items answering calls this server handed out."""
    found: list[tuple[str, str]] = []
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if not isinstance(item, dict) or item.get("type") != "function_call_output":
            break
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or parse_call_id(call_id) is None:
            return []
        found.append((call_id, _text(item.get("output"), f"input[{i}]")))
    found.reverse()
    return found


