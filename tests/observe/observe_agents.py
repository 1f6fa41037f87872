"""Agents for the observability tests, importable by `podium` subprocesses."""

from __future__ import annotations

import time
from collections.abc import Sequence

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool, tool_call_reply
from podium.messages import Message


@tool
async def fetch_invoice_synchronously(order: str) -> str:
    """Look up an invoice with a synchronous SDK call: it blocks the event loop.

    Args:
        order: The order id.
    """
    time.sleep(0.25)  # noqa: ASYNC251 - the bug under test
    return f"invoice for {order}"


@tool
async def lookup(order: str) -> str:
    """Look up an order.

    Args:
        order: The order id.
    """
    return f"order {order}: shipped"


def _two_steps(tool_name: str) -> FunctionModel:
    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply((tool_name, '{"order": "A-1"}'))
        return "It shipped."

    return FunctionModel(reply, name="scripted")


def blocky() -> Agent:
    return Agent("blocky", _two_steps("fetch_invoice_synchronously"),
                 tools=[fetch_invoice_synchronously])


def support() -> Agent:
    return Agent("support", _two_steps("lookup"), tools=[lookup])


def remote() -> Agent:
    """The support agent on an OpenAI-compatible server at ``$OBSERVE_MODEL_URL`` (a test's
    recording proxy in front of ``podium sim-server``)."""
    import os

    from podium.models.openai import OpenAIChatModel

    return Agent("remote", OpenAIChatModel(os.environ["OBSERVE_MODEL_URL"], "podium-sim"),
                 tools=[lookup])
