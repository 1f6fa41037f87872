"""Security: where tools may connect (egress), what the model may read (screening),
where code may run (sandbox)."""

from podium.security.egress import EgressDenied, EgressPolicy, GuardedResolver

__all__ = ("EgressDenied", "EgressPolicy", "GuardedResolver")
