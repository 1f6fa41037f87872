"""Context management: token counting, the append-only buffer, truncation, compaction."""

from podium.context.buffer import (
    SUMMARY_MARKER,
    CompactionPlan,
    ContextBuffer,
    Prefix,
    truncate_text,
)
from podium.context.tokenizers import (
    EstimateTokenizer,
    HuggingFaceTokenizer,
    Tokenizer,
    count_message,
)

__all__ = (
    "SUMMARY_MARKER",
    "CompactionPlan",
    "ContextBuffer",
    "EstimateTokenizer",
    "HuggingFaceTokenizer",
    "Prefix",
    "Tokenizer",
    "count_message",
    "truncate_text",
)
