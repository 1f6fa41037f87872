"""Tools from an OpenAPI document, called against a real server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from podium.errors import ToolDefinitionError
from podium.security import EgressDenied, EgressPolicy
from podium.tools import ToolContext, ToolExecutor
from podium.tools.openapi import openapi_tools

pytestmark = pytest.mark.anyio

ORDERS = {"A-1": {"order_id": "A-1", "status": "shipped"}}

SPEC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "shop", "version": "1"},
    "servers": [{"url": "http://placeholder"}],
    "paths": {
        "/orders/{order_id}": {
            "parameters": [{"$ref": "#/components/parameters/OrderId"}],
            "get": {"operationId": "getOrder", "summary": "Look up one order."},
        },
        "/orders": {
            "get": {
                "operationId": "listOrders",
                "summary": "List orders.",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "enum": ["shipped", "delivered"]},
                    },
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "verbose", "in": "query", "schema": {"type": "boolean"}},
                ],
            }
        },
        "/refunds": {
            "post": {
                "operationId": "createRefund",
                "summary": "Refund an order.",
                "requestBody": {
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Refund"}}
                    }
                },
            }
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {"content": {"application/octet-stream": {}}},
            }
        },
    },
    "components": {
        "parameters": {
            "OrderId": {
                "name": "order_id",
                "in": "path",
                "required": True,
                "description": "The order's id.",
                "schema": {"type": "string"},
            }
        },
        "schemas": {
            "Refund": {
                "type": "object",
                "required": ["order_id", "amount_cents"],
                "properties": {
                    "order_id": {"type": "string"},
                    "amount_cents": {"type": "integer", "minimum": 1},
                    "reason": {"type": "string", "description": "Why."},
                },
            }
        },
    },
}


@asynccontextmanager
async def shop() -> AsyncIterator[str]:
    async def get_order(request: web.Request) -> web.Response:
        order = ORDERS.get(request.match_info["order_id"])
        if order is None:
            raise web.HTTPNotFound()
        return web.json_response(order)

    async def list_orders(request: web.Request) -> web.Response:
        return web.json_response(dict(request.query))

    async def refund(request: web.Request) -> web.Response:
        return web.json_response({"refunded": await request.json()})

    app = web.Application()
    app.router.add_get("/orders/{order_id}", get_order)
    app.router.add_get("/orders", list_orders)
    app.router.add_post("/refunds", refund)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_operations_become_tools() -> None:
    async with shop() as base:
        tools = openapi_tools(SPEC, base_url=base, policy=EgressPolicy.loopback())
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {"getOrder", "listOrders", "createRefund"}
        assert "upload" in tools.skipped and "JSON" in tools.skipped["upload"]

        get_order = by_name["getOrder"]
        assert get_order.description == "Look up one order."
        assert get_order.parameters["required"] == ["order_id"]
        assert get_order.parameters["properties"]["order_id"]["description"] == "The order's id."
        assert not get_order.policy.side_effects
        assert await get_order.fn(order_id="A-1") == ORDERS["A-1"]

        listing = by_name["listOrders"]
        assert listing.parameters["required"] == ["status"]
        assert listing.parameters["properties"]["status"]["enum"] == ["shipped", "delivered"]
        assert await listing.fn(status="shipped", limit=5, verbose=True) == {
            "status": "shipped",
            "limit": "5",
            "verbose": "true",
        }

        refund = by_name["createRefund"]
        assert refund.policy.side_effects
        assert sorted(refund.parameters["required"]) == ["amount_cents", "order_id"]
        assert refund.parameters["properties"]["amount_cents"]["minimum"] == 1
        assert await refund.fn(order_id="A-1", amount_cents=500, reason=None) == {
            "refunded": {"order_id": "A-1", "amount_cents": 500}
        }


async def test_errors_and_refusals_are_observations() -> None:
    async with shop() as base:
        allowed = {
            t.name: t for t in openapi_tools(SPEC, base_url=base, policy=EgressPolicy.loopback())
        }
        refused = {t.name: t for t in openapi_tools(SPEC, base_url=base)}  # public web only
        executor = ToolExecutor(max_threads=1)
        try:
            missing = await executor.execute(
                allowed["getOrder"],
                allowed["getOrder"].decode_arguments('{"order_id": "Z-9"}'),
                ToolContext("r", 0, 0, "c0"),
            )
            denied = await executor.execute(
                refused["getOrder"],
                refused["getOrder"].decode_arguments('{"order_id": "A-1"}'),
                ToolContext("r", 0, 1, "c1"),
            )
        finally:
            executor.close()
        assert not missing.ok and "HTTP 404" in missing.content
        assert not denied.ok and EgressDenied.__name__ in denied.content


def test_unknown_operations_are_an_error() -> None:
    with pytest.raises(ToolDefinitionError, match="no such operations"):
        openapi_tools(SPEC, base_url="http://x", operations=["nope"])
