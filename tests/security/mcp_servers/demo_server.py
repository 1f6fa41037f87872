"""A small MCP server (the SDK's MCPServer, formerly FastMCP) for the MCP client tests.

    python demo_server.py stdio
    python demo_server.py http PORT

Tools: ``add``, ``echo``, ``fail`` (an error result), ``crash`` (the process dies
mid-call), ``pid``, ``grow`` (adds a tool and notifies the client that the list changed),
``hang`` (the first call writes the server's pid to a file and waits to be killed).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("demo")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat a text."""
    return " ".join([text] * times)


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"failed on purpose: {reason}")


@server.tool()
def crash() -> str:
    """Kills the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def hang(marker: str) -> str:
    """The first call (no ``marker`` file yet) writes this process's id there and waits
    to be killed; a call that finds the file answers at once."""
    path = Path(marker)
    if path.exists():
        return "answered after a restart"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)  # whole, or not there: the test reads it while we wait
    time.sleep(300)  # a sync tool: the SDK runs it in a worker thread
    return "not killed"


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called ``name`` and tell the client the tool list changed."""

    def extra() -> str:
        return f"I am {name}"

    server.add_tool(extra, name=name, description=f"A tool added at run time: {name}.")
    await ctx.session.send_tool_list_changed()  # the classic notifications/tools/list_changed
    return f"added {name}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
