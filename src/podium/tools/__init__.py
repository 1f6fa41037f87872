"""Tools: ``@tool``, schemas, policies (timeout, retry, breaker, limits) and the executor;
HTTP tools (:mod:`podium.tools.http`), sandboxed code (:mod:`podium.tools.sandboxed`) and
MCP tools (:mod:`podium.tools.mcp`, imported on demand: it loads the MCP SDK)."""

from podium.tools.executor import ToolExecutor, ToolResult, render_result
from podium.tools.http import HttpClient, http_tool
from podium.tools.policy import BreakerPolicy, CircuitBreaker, ToolPolicy, backoff_delay
from podium.tools.sandboxed import run_python, run_python_tool
from podium.tools.threads import ToolThreads
from podium.tools.tool import Tool, ToolContext, tool

__all__ = (
    "BreakerPolicy",
    "CircuitBreaker",
    "HttpClient",
    "MCPServer",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolPolicy",
    "ToolResult",
    "ToolThreads",
    "backoff_delay",
    "http_tool",
    "render_result",
    "run_python",
    "run_python_tool",
    "tool",
)


def __getattr__(name: str) -> object:
    # MCP loads the SDK (pydantic, an HTTP client...): only when it is asked for.
    if name == "MCPServer":
        from podium.tools.mcp import MCPServer

        return MCPServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
