"""An MCP server over streamable HTTP that misbehaves on purpose (raw JSON-RPC on aiohttp).

    python hostile_http_server.py http PORT MODE

``initialize`` and ``tools/list`` (one tool, ``poke``) are answered like a real server's;
``tools/call`` is answered as MODE says:

- ``404``, ``500``, ``401``: that status, no message.
- ``stall``: a ``text/event-stream`` response that never sends an event.
- ``huge``: a 64 MB JSON body.
- ``redirect:URL``: a 307 to URL (another host).
- ``ok``: ``poked``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from aiohttp import web

MODE = sys.argv[3]
SESSION = "hostile-session"


def answer(rid: Any, result: dict[str, Any]) -> web.Response:
    body = {"jsonrpc": "2.0", "id": rid, "result": result}
    return web.json_response(body, headers={"mcp-session-id": SESSION})


async def mcp(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return web.Response(status=405)
    message = await request.json()
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        return web.Response(status=202)
    if method == "initialize":
        return answer(rid, {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile-http", "version": "0"},
        })
    if method == "tools/list":
        return answer(rid, {"tools": [{"name": "poke", "inputSchema": {"type": "object"}}]})
    if method != "tools/call":
        return web.json_response({"jsonrpc": "2.0", "id": rid,
                                  "error": {"code": -32601, "message": str(method)}})
    if MODE in ("404", "500", "401"):
        return web.Response(status=int(MODE), text="no")
    if MODE == "stall":
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        await asyncio.sleep(3600)
        return stream
    if MODE == "huge":
        text = "x" * 64_000_000
        return web.Response(body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": text}]}}), content_type="application/json")
    if MODE.startswith("redirect:"):
        raise web.HTTPTemporaryRedirect(MODE.removeprefix("redirect:"))
    return answer(rid, {"content": [{"type": "text", "text": "poked"}]})


if __name__ == "__main__":
    app = web.Application(client_max_size=1 << 20)
    app.router.add_route("*", "/mcp", mcp)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None, access_log=None,
                shutdown_timeout=0.1)
