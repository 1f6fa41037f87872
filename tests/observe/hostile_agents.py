"""Agents whose runs carry hostile text everywhere a human later reads it.

The input, the model's replies and tool calls, the tools' results and errors hold HTML
and script markup, terminal escape sequences, rich markup and odd unicode, so the
dashboard, the HTML report and ``podium runs`` can be checked against real runs (made by
the engine, stored by a real store), not against records built by hand.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool, tool_call_reply
from podium.messages import Message

#: Script that must never run: each sets ``window.pwned`` (and raises a dialog).
XSS = (
    '<script>window.pwned=1;alert(1)</script>'
    '"><img src=x onerror="window.pwned=2;alert(2)">'
    "'><svg onload=\"window.pwned=3\"><text>svg</text></svg>"
    "</script><script>window.pwned=4</script>"
    '<a href="javascript:window.pwned=5">link</a>'
    "\u2028\u2029</title></textarea>"
)
#: What a terminal must not act on: clear screen, retitle the window, a hyperlink,
#: a bell, a cursor move, a C1 CSI, a carriage return hiding the start of the line.
ANSI = ("\x1b[2J\x1b[31mred\x1b[0m\x1b]0;pwned-title\x07"
        "\x1b]8;;http://evil.test\x1b\\link\x1b]8;;\x1b\\\x07\x1b[10A\x9b31m\rcovered")
#: Rich console markup that must print literally.
MARKUP = "[bold red]not bold[/] [link=http://evil.test]x[/link] \\[escaped]"
#: Unicode outside the BMP and a bidi override.
UNICODE = "emoji 🦄 math 𝔸 rtl \u202eevil\u202c end"
HOSTILE = f"{XSS} {ANSI} {MARKUP} {UNICODE}"
BIG = 5 * 1024 * 1024  # characters of the big tool result


@tool
async def hostile_lookup(order: str) -> str:
    """Look up an order; the result repeats the hostile text.

    Args:
        order: The order id (``big`` for a 5 MB result).
    """
    if order == "big":
        return ("<script>window.pwned=6</script>" + "x" * BIG)[:BIG]
    return f"{HOSTILE} order {order}"


@tool
async def hostile_failure(order: str) -> str:
    """Fail with a hostile error message.

    Args:
        order: The order id.
    """
    raise RuntimeError(f"{HOSTILE} for {order}")


def _reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if request.step == 0:
        return tool_call_reply(
            ("hostile_lookup", json.dumps({"order": HOSTILE})),
            ("hostile_lookup", json.dumps({"order": "big"})),
            ("hostile_failure", json.dumps({"order": "A-1"})),
            (XSS + ANSI, "{}"),  # a tool the model made up: its name is hostile too
            content=HOSTILE,
        )
    return f"final {HOSTILE}"


def hostile() -> Agent:
    return Agent("hostile", FunctionModel(_reply, name=f"model {XSS}"),
                 tools=[hostile_lookup, hostile_failure])


def _long(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if request.step < 10_000 - 1:
        return tool_call_reply(("hostile_lookup", '{"order": "n"}'))
    return "done"


def long_run() -> Agent:
    """10,000 steps of one small tool call each."""
    return Agent("long", FunctionModel(_long), tools=[hostile_lookup], max_steps=20_000)
