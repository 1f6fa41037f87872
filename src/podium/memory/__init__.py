"""Long-term memory: a small interface and a keyword/recency implementation on a run store."""

from podium.memory.base import Memory
from podium.memory.item import MemoryItem
from podium.memory.keyword import StoreMemory, keywords
from podium.memory.tools import Namespace, memory_tools, per_run

__all__ = (
    "Memory",
    "MemoryItem",
    "Namespace",
    "StoreMemory",
    "keywords",
    "memory_tools",
    "per_run",
)
