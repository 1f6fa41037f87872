"""The injection screen's verdict, as journaled: a leaf module so that run records and tool
results can carry a verdict without importing the screen (which imports them)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ("ScreenVerdict", "Screened")


class ScreenVerdict(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What the screen decided about one text. ``action`` is ``allow`` below the threshold."""

    source: str
    rule: str
    score: float
    action: Literal["allow", "flag", "redact", "block"]
    screener: str = ""
    excerpt: str = ""
    #: What the guard model said, when it was asked (see podium.security.guard_model).
    guard: str = ""
    #: The first pass's rule that the guard's ``safe`` overruled.
    overruled: str = ""


class Screened(msgspec.Struct, tag="screen", gc=False):
    """Journal entry: the verdict on the run's input (tool results carry their own)."""

    ts: float
    verdict: ScreenVerdict
