"""Model backends: the interface, the simulated model, the function-backed test double,
the OpenAI-compatible client, the backend pool and the simulated inference server."""

import importlib
from typing import TYPE_CHECKING, Any

from podium.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OutputMode,
    OutputSchema,
    StreamDelta,
    ToolDefinition,
)
from podium.models.function import FunctionModel, tool_call_reply
from podium.models.simulated import LatencyModel, Scenario, SimStep, SimToolCall, SimulatedModel

if TYPE_CHECKING:
    from podium.models.openai import OpenAIChatModel
    from podium.models.openai_wire import StreamTruncatedError
    from podium.models.pool import Backend, BackendPool, BackendStatistics, PoolStatistics
    from podium.models.pool_routing import Router, RoutingRule
    from podium.models.resilience import CircuitBreaker, RetryPolicy, Timeouts
    from podium.models.sim_batching import BatchingConfig

# The HTTP client stack (aiohttp) costs a third of a second to import: load it only
# for programs that use a real backend, not for every `import podium`.
_LAZY = {
    "OpenAIChatModel": "podium.models.openai",
    "StreamTruncatedError": "podium.models.openai_wire",
    "Backend": "podium.models.pool",
    "BackendPool": "podium.models.pool",
    "BackendStatistics": "podium.models.pool",
    "PoolStatistics": "podium.models.pool",
    "Router": "podium.models.pool_routing",
    "RoutingRule": "podium.models.pool_routing",
    "CircuitBreaker": "podium.models.resilience",
    "RetryPolicy": "podium.models.resilience",
    "Timeouts": "podium.models.resilience",
    "BatchingConfig": "podium.models.sim_batching",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'podium.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = (
    "Backend",
    "BackendPool",
    "BackendStatistics",
    "BatchingConfig",
    "CircuitBreaker",
    "FunctionModel",
    "LatencyModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OpenAIChatModel",
    "OutputMode",
    "OutputSchema",
    "PoolStatistics",
    "RetryPolicy",
    "Router",
    "RoutingRule",
    "Scenario",
    "SimStep",
    "SimToolCall",
    "SimulatedModel",
    "StreamDelta",
    "StreamTruncatedError",
    "Timeouts",
    "ToolDefinition",
    "tool_call_reply",
)
