"""Security: where tools may connect (egress), what the model may read (screening) and
say (the output guard), where code may run (sandbox)."""

from typing import TYPE_CHECKING

from podium.security.egress import EgressDenied, EgressPolicy
from podium.security.findings import Finding
from podium.security.first_pass import FirstPass
from podium.security.heuristics import HeuristicScreener
from podium.security.learned import LearnedScreener
from podium.security.output_guard import OutputGuard
from podium.security.sandbox import (
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
)
from podium.security.screen import (
    Screened,
    Screener,
    ScreeningPolicy,
    ScreenVerdict,
    screening_statistics,
)

if TYPE_CHECKING:
    from podium.security.resolver import GuardedResolver

__all__ = (
    "EgressDenied",
    "EgressPolicy",
    "Finding",
    "FirstPass",
    "GuardedResolver",
    "HeuristicScreener",
    "LearnedScreener",
    "OutputGuard",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "ScreenVerdict",
    "Screened",
    "Screener",
    "ScreeningPolicy",
    "screening_statistics",
)


def __getattr__(name: str) -> object:
    # The resolver loads aiohttp (a third of a second): only for who asks for it.
    if name == "GuardedResolver":
        from podium.security.resolver import GuardedResolver

        return GuardedResolver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
