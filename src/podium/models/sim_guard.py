"""The sim-server as a guard model (``podium sim-server --guard``): a classifier in Llama
Guard's shape, so that a guard stage is tested end to end without weights.

Its verdict on the last user message is ``safe``, or ``unsafe`` and a category line
(``S14``, Llama Guard 3's code injection / prompt attack category), decided by a few
fixed marker phrases: a stand-in for a model, deterministic, not a screen anyone should
use. The modes a test needs:

- ``classify``: the verdict, after ``guard_delay_s`` (a slow guard);
- ``garbage``: a reply that is no verdict at all (a guard misconfigured, a chat model
  where a classifier was meant).

A guard that is *down* is no server at all (a closed port), or ``--hang-after 0``.
"""

from __future__ import annotations

__all__ = ("GUARD_MODES", "MARKERS", "guard_reply")

GUARD_MODES = ("off", "classify", "garbage")
#: What the simulated guard calls unsafe (lower-cased substrings).
MARKERS = (
    "ignore previous",
    "ignore all previous",
    "disregard",
    "system prompt",
    "exfiltrate",
    "you are now",
    "new instructions",
)


def guard_reply(mode: str, text: str) -> str:
    """What the simulated guard answers about ``text``."""
    if mode == "garbage":
        return "Sure! Here is a poem about safety:\nRoses are red."
    lowered = text.lower()
    if any(m in lowered for m in MARKERS):
        return "unsafe\nS14"
    return "safe"
