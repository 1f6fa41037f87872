"""Token counting: a fast built-in estimate, or any Hugging Face ``tokenizer.json``.

The engine counts every message once, when it enters a context, and caches
the count on the message; so the tokenizer's cost is paid per new text, never
per step over the whole history.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.messages import Message, ToolCall

__all__ = (
    "MESSAGE_OVERHEAD_TOKENS",
    "EstimateTokenizer",
    "HuggingFaceTokenizer",
    "Tokenizer",
    "count_message",
)

#: Tokens a chat template adds around each message (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4
#: Tokens a chat template adds around each tool call of a message.
_CALL_OVERHEAD_TOKENS = 3
# EstimateTokenizer.count_message's sums: an overhead and a text's one token (see count).
_TEXT_AND_OVERHEAD = MESSAGE_OVERHEAD_TOKENS + 1
_CALL_AND_NAME = _CALL_OVERHEAD_TOKENS + 1


class Tokenizer(abc.ABC):
    """Counts tokens of text and cuts text to a token budget."""

    name: str = "tokenizer"

    @abc.abstractmethod
    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""

    def count_message(self, message: Message) -> int:
        """Tokens of one message, template overhead and tool calls included."""
        n = MESSAGE_OVERHEAD_TOKENS + self.count(message.content)
        for call in message.tool_calls:
            n += self.count(call.name) + self.count(call.arguments) + _CALL_OVERHEAD_TOKENS
        return n

    def count_reply(self, content: str, tool_calls: tuple[ToolCall, ...], reasoning: str) -> int:
        """Tokens of the assistant message a reply makes (its parts), as
        :meth:`count_message` counts it: counted before the message is built, so it is
        built with them."""
        return self.count_message(Message("assistant", content, tool_calls, reasoning=reasoning))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``max_tokens`` tokens.

        The generic version bisects on character length; subclasses with
        offsets do it in one pass.
        """
        if self.count(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


class EstimateTokenizer(Tokenizer):
    """About four characters a token, the usual rule for English BPE vocabularies.

    It costs one ``len`` call, which is why it is the default: exact counts
    matter for billing, estimates are enough for budgets.
    """

    name = "estimate"

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if chars_per_token <= 0:
            raise ConfigError("chars_per_token must be positive")
        self._cpt = chars_per_token
        # len / chars_per_token, floored, in integers: ``int(float)`` is a type call (~80 ns)
        # and this runs for every message that enters a context.
        self._num, self._den = float(chars_per_token).as_integer_ratio()

    def count(self, text: str) -> int:
        n = len(text)
        return n * self._den // self._num + 1 if n else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        if self.count(text) <= max_tokens:
            return text
        return text[: max(0, int((max_tokens - 1) * self._cpt))]

    def count_message(self, message: Message) -> int:
        """Counted inline, lengths only (it runs at every step). Each text that is not empty
        counts as :meth:`count` counts it: its length in tokens, plus one."""
        return self.count_reply(message.content, message.tool_calls, "")

    def count_reply(self, content: str, tool_calls: tuple[ToolCall, ...], reasoning: str) -> int:
        """As :meth:`count_message` (the reasoning is not counted: it is not sent back)."""
        num, den = self._num, self._den
        text = content
        # (The overheads and each text's one folded in: fewer operations at every step.)
        n = len(text) * den // num + _TEXT_AND_OVERHEAD if text else MESSAGE_OVERHEAD_TOKENS
        for call in tool_calls:
            name, arguments = call.name, call.arguments
            n += len(name) * den // num + _CALL_AND_NAME if name else _CALL_OVERHEAD_TOKENS
            if arguments:
                n += len(arguments) * den // num + 1
        return n


class HuggingFaceTokenizer(Tokenizer):
    """Exact counts from a Hugging Face ``tokenizer.json`` (needs ``podium[hf]``)."""

    def __init__(self, tokenizer: Any, name: str = "huggingface") -> None:
        self._tok = tokenizer
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path) -> HuggingFaceTokenizer:
        try:
            from tokenizers import Tokenizer as _HFTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("HuggingFaceTokenizer needs `pip install podium[hf]`") from exc
        return cls(_HFTokenizer.from_file(str(path)), name=Path(path).name)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, max_tokens: int) -> str:
        enc = self._tok.encode(text, add_special_tokens=False)
        if len(enc.ids) <= max_tokens:
            return text
        # A byte-level vocabulary splits a character over several tokens, all with the
        # character's offsets: a cut at a token's end may take the whole character, more
        # tokens than asked. Step back until the cut text counts within the budget.
        for keep in range(max_tokens, 0, -1):
            head = text[: enc.offsets[keep - 1][1]]
            if self.count(head) <= max_tokens:
                return head
        return ""


def count_message(tokenizer: Tokenizer, message: Message) -> int:
    """Tokens of one message, template overhead and tool calls included."""
    return tokenizer.count_message(message)
