"""Security: where tools may connect (egress), what the model may read (screening),
where code may run (sandbox)."""

from podium.security.egress import EgressDenied, EgressPolicy, GuardedResolver
from podium.security.findings import Finding
from podium.security.heuristics import HeuristicScreener
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

__all__ = (
    "EgressDenied",
    "EgressPolicy",
    "Finding",
    "GuardedResolver",
    "HeuristicScreener",
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
