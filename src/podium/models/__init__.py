"""Model backends: the interface, the simulated model and the function-backed test double."""

from podium.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    StreamDelta,
    ToolDefinition,
)
from podium.models.function import FunctionModel, tool_call_reply
from podium.models.simulated import LatencyModel, Scenario, SimStep, SimToolCall, SimulatedModel

__all__ = (
    "FunctionModel",
    "LatencyModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "Scenario",
    "SimStep",
    "SimToolCall",
    "SimulatedModel",
    "StreamDelta",
    "ToolDefinition",
    "tool_call_reply",
)
