"""Podium: a runtime that serves LLM agents at high concurrency on CPUs.

The public API is re-exported here; everything else is internal.
"""

from podium._version import __version__ as __version__
from podium.agent import Agent, ContextPolicy
from podium.context import EstimateTokenizer, HuggingFaceTokenizer, Tokenizer
from podium.engine import (
    Engine,
    ProfileAggregator,
    ProfileSummary,
    RunProfile,
    RunRecord,
    StepProfile,
)
from podium.engine.approvals import PendingApproval
from podium.errors import (
    ConfigError,
    DecisionError,
    Interrupt,
    ModelError,
    ModelReplyError,
    OutputValidationError,
    PodiumError,
    RetryableToolError,
    RunError,
    ThreadNotFoundError,
)
from podium.handoffs import Handoff, HandoffFilter, last_turns, remove_tool_calls
from podium.memory import Memory, MemoryItem, StoreMemory, memory_tools
from podium.messages import Message, ToolCall, Usage
from podium.models import (
    FunctionModel,
    LatencyModel,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    tool_call_reply,
)
from podium.security import EgressPolicy, Sandbox, ScreeningPolicy
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.streaming import LocalTokenChannel, TokenChannel, TokenDelta, TokenSubscription
from podium.threads import ThreadRecord
from podium.tools import BreakerPolicy, Tool, ToolContext, ToolPolicy, tool

__all__ = (
    "Agent",
    "BreakerPolicy",
    "ConfigError",
    "ContextPolicy",
    "DecisionError",
    "EgressPolicy",
    "Engine",
    "EstimateTokenizer",
    "FunctionModel",
    "Handoff",
    "HandoffFilter",
    "HuggingFaceTokenizer",
    "Interrupt",
    "LatencyModel",
    "LocalTokenChannel",
    "Memory",
    "MemoryItem",
    "MemoryRunStore",
    "Message",
    "Model",
    "ModelError",
    "ModelReplyError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputValidationError",
    "PendingApproval",
    "PodiumError",
    "ProfileAggregator",
    "ProfileSummary",
    "RetryableToolError",
    "RunError",
    "RunProfile",
    "RunRecord",
    "RunStore",
    "Sandbox",
    "Scenario",
    "ScreeningPolicy",
    "SimStep",
    "SimToolCall",
    "SimulatedModel",
    "StepProfile",
    "StoreMemory",
    "ThreadNotFoundError",
    "ThreadRecord",
    "TokenChannel",
    "TokenDelta",
    "TokenSubscription",
    "Tokenizer",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolPolicy",
    "Usage",
    "last_turns",
    "memory_tools",
    "remove_tool_calls",
    "tool",
    "tool_call_reply",
)
