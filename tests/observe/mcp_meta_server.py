"""An MCP server (the SDK's) whose tool answers with the trace context it was sent.

    python mcp_meta_server.py stdio
    python mcp_meta_server.py http PORT

``trace_seen`` returns, as JSON, the ``traceparent`` and ``tracestate`` of its
``tools/call``'s ``params._meta`` (null when absent), and the ``traceparent`` header of
the HTTP request that carried it (null over stdio).
"""

from __future__ import annotations

import json
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("meta")


@server.tool()
def trace_seen(ctx: Context) -> str:
    """The trace context this call arrived with."""
    meta = ctx.request_context.meta or {}
    headers = ctx.headers or {}
    return json.dumps({
        "traceparent": meta.get("traceparent"),
        "tracestate": meta.get("tracestate"),
        "header": headers.get("traceparent"),
    })


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
