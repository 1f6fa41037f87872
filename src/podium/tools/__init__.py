"""Tools: ``@tool``, schemas, policies (timeout, retry, breaker, limits) and the executor."""

from podium.tools.executor import ToolExecutor, ToolResult, render_result
from podium.tools.policy import BreakerPolicy, CircuitBreaker, ToolPolicy, backoff_delay
from podium.tools.threads import ToolThreads
from podium.tools.tool import Tool, ToolContext, tool

__all__ = (
    "BreakerPolicy",
    "CircuitBreaker",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolPolicy",
    "ToolResult",
    "ToolThreads",
    "backoff_delay",
    "render_result",
    "tool",
)
