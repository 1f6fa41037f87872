"""@tool: schema from the signature and a Google docstring, one-pass validation, ToolContext."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Literal

import msgspec
import pytest

from podium import ToolContext, tool
from podium.errors import ToolDefinitionError


@tool
def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast") -> list[str]:
    """Search the catalogue.

    Longer explanation that is still part of the summary.

    Args:
        query: What to search for.
        limit (int): How many hits to return,
            at most fifty.
        mode: Search depth.

    Returns:
        The hits.
    """
    return [query] * limit


@tool(side_effects=True)
def refund(order_id: str, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
    """
    return ctx.idempotency_key


def test_schema_comes_from_signature_and_docstring() -> None:
    assert search.name == "search"
    assert search.description.startswith("Search the catalogue.")
    assert "Returns" not in search.description
    params = search.parameters
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["query"] == {"type": "string", "description": "What to search for."}
    assert props["limit"]["type"] == "integer"
    assert props["limit"]["default"] == 5
    assert props["limit"]["description"] == "How many hits to return, at most fifty."
    assert sorted(props["mode"]["enum"]) == ["deep", "fast"]
    assert "$defs" not in msgspec.json.encode(params).decode()
    assert search.definition.name == "search"


def test_decorated_function_stays_callable() -> None:
    assert search("x", limit=2) == ["x", "x"]


def test_arguments_are_parsed_and_validated_in_one_pass() -> None:
    args = search.decode_arguments('{"query": "podium", "limit": 3}')
    assert (args.query, args.limit, args.mode) == ("podium", 3, "fast")
    for bad in (
        '{"limit": 3}',  # missing required
        '{"query": 1}',  # wrong type
        '{"query": "x", "mode": "slow"}',  # not in the enum
        '{"query": "x", "extra": 1}',  # unknown field
        '{"query": ',  # not JSON
    ):
        with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
            search.decode_arguments(bad)


def test_tool_context_is_not_in_the_schema_and_gets_the_idempotency_key() -> None:
    assert list(refund.parameters["properties"]) == ["order_id"]
    assert refund.context_param == "ctx"
    assert refund.policy.side_effects
    args = refund.decode_arguments('{"order_id": "A-1"}')
    ctx = ToolContext("run_x", 3, 1, "call_3_1")
    kwargs = refund.kwargs(args, ctx)
    assert kwargs == {"order_id": "A-1", "ctx": ctx}
    assert refund.fn(**kwargs) == "run_x:3:1"


def test_untyped_or_variadic_parameters_are_refused() -> None:
    with pytest.raises(ToolDefinitionError):

        @tool
        def untyped(x):  # type: ignore[no-untyped-def]
            return x

    with pytest.raises(ToolDefinitionError):

        @tool
        def variadic(*xs: int) -> int:
            return sum(xs)


@pytest.mark.anyio
async def test_an_inline_call_passes_each_argument_to_its_parameter() -> None:
    # The executor passes a plain signature's arguments positionally (no keyword dict):
    # each must still reach its own parameter, and keyword-only ones go by name.
    from podium.tools import ToolExecutor

    @tool
    async def plain(first: str, second: int, third: str = "c") -> str:
        """Echo its arguments."""
        return f"{first}|{second}|{third}"

    @tool
    async def keywords(first: str, *, second: int = 2, third: str) -> str:
        """Echo its arguments."""
        return f"{first}|{second}|{third}"

    def by_name(fn: Any) -> Any:  # a decorator whose wrapper takes keywords only
        @functools.wraps(fn)
        async def wrapper(**kwargs: Any) -> Any:
            return await fn(**kwargs)

        return wrapper

    @tool
    @by_name
    async def wrapped(first: str, second: int) -> str:
        """Echo its arguments."""
        return f"{first}|{second}"

    assert plain.positional and not keywords.positional and not refund.positional
    assert not wrapped.positional
    executor = ToolExecutor()
    try:
        for fn, raw, want in (
            (plain, '{"third": "z", "second": 7, "first": "a"}', "a|7|z"),
            (plain, '{"second": 1, "first": "b"}', "b|1|c"),
            (keywords, '{"third": "z", "first": "a"}', "a|2|z"),
            (wrapped, '{"second": 3, "first": "w"}', "w|3"),
        ):
            ctx = ToolContext("run_x", 0, 0, "call_0")
            result = executor.start(fn, fn.decode_arguments(raw), ctx)
            assert not inspect.isawaitable(result)
            assert result.content == want
    finally:
        executor.close()
