"""The OpenAPI document and the routes served come from one table: every route the app
serves is in the document with the same methods, and every documented operation is served
(asked of the running app, not of the table)."""

from __future__ import annotations

import re

import pytest
from starlette.routing import Route

from conftest import gateway_client
from podium.gateway.app import create_app, table_routes
from podium.gateway.routes import OPERATIONS, Operation, Reply

pytestmark = pytest.mark.anyio

#: Served and deliberately not in the document, and why.
UNDOCUMENTED = {
    "/openapi.json": "the document itself",
    "/dashboard": "the operator's HTML page, not the API",
    "/dashboard/data": "the dashboard page's own feed",
    "/dashboard/runs": "the dashboard's runs view's feed (operator keys only)",
    "/mcp": "the MCP endpoint speaks MCP (its own protocol and discovery), not REST",
}


async def test_every_route_served_is_documented_and_every_operation_served() -> None:
    async with gateway_client() as (gw, client):
        document = (await client.get("/openapi.json")).json()
        app = create_app(gw, manage_lifecycle=False)  # what the client is served, again
        served: dict[str, set[str]] = {}
        for route in app.routes:
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            methods = getattr(route, "methods", None) or {"*"}
            served[path] = {m.lower() for m in methods} - {"head"}
    assert set(UNDOCUMENTED) <= set(served)
    api = {path: methods for path, methods in served.items() if path not in UNDOCUMENTED}
    documented = {path: set(ops) for path, ops in document["paths"].items()}
    assert api == documented


async def test_each_method_of_each_path_reaches_its_handler() -> None:
    # Two operations on one path share a route: each method is dispatched, none is a 405.
    async with gateway_client() as (_, client):
        for op in OPERATIONS:
            if op.method == "GET" and "{" not in op.path:
                path = op.path
                response = await client.request(op.method, path)
                # /metrics: a tenant's key is refused by the handler (403), not the router.
                assert response.status_code in (200, 403), (op.method, path, response.text)
        for method, path in (("GET", "/v1/threads/th_x"), ("DELETE", "/v1/threads/th_x"),
                             ("POST", "/v1/runs/r/cancel")):
            assert (await client.request(method, path)).status_code not in (405, 500)


def test_an_operation_without_a_handler_is_refused() -> None:
    extra = Operation("GET", "/v1/nowhere", "nowhere", "No handler", {"200": Reply("-")})

    async def handler(request: object) -> object:
        raise AssertionError

    with pytest.raises(ValueError, match="nowhere"):
        table_routes((extra,), {})
    with pytest.raises(ValueError, match="stray"):
        table_routes((), {"stray": handler})  # type: ignore[dict-item]
    routes = table_routes((extra,), {"nowhere": handler})  # type: ignore[dict-item]
    assert [(r.path, r.methods) for r in routes if isinstance(r, Route)] == [
        ("/v1/nowhere", {"GET", "HEAD"})
    ]
