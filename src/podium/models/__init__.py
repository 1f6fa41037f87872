"""Model backends: the interface, the simulated model, the function-backed test double,
the OpenAI-compatible client, the backend pool and the simulated inference server."""

from podium.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    StreamDelta,
    ToolDefinition,
)
from podium.models.function import FunctionModel, tool_call_reply
from podium.models.openai import OpenAIChatModel
from podium.models.openai_wire import StreamTruncatedError
from podium.models.pool import Backend, BackendPool, BackendStatistics, PoolStatistics
from podium.models.pool_routing import Router, RoutingRule
from podium.models.resilience import CircuitBreaker, RetryPolicy, Timeouts
from podium.models.sim_batching import BatchingConfig
from podium.models.simulated import LatencyModel, Scenario, SimStep, SimToolCall, SimulatedModel

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
