"""What a screener reports: one suspicious span of a text."""

from __future__ import annotations

import msgspec

__all__ = ("Finding",)


class Finding(msgspec.Struct, frozen=True, gc=False):
    """One suspicious span: which rule matched, how sure it is (0–1), where (``[start:end]``
    of the screened text; ``0, 0`` when the rule concerns the whole text)."""

    rule: str
    score: float
    start: int = 0
    end: int = 0
