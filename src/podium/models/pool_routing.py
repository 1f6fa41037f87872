"""Routing rules: which group of backends serves a call (hybrid CPU/GPU routing).

A rule matches on the request's scheduling hints; the first rule that
matches names the call's group, else the default group. Each group has a
fallback chain used only when the group has no healthy backend.

Example: short prompts and agents tagged ``small`` to a CPU pool, the rest
to the GPUs, each pool falling back to the other::

    Router(
        [RoutingRule("cpu", max_prompt_tokens=2_000), RoutingRule("cpu", tags=("small",))],
        default_group="gpu",
        groups=("gpu", "cpu"),
    )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from podium.errors import ConfigError
from podium.models.base import ModelRequest

__all__ = ("Router", "RoutingRule")


class RoutingRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Send calls to ``group`` when every condition given holds.

    ``tags`` and ``agents`` match if the request has any of them; prompt
    bounds compare ``ModelRequest.prompt_tokens``.
    """

    group: str
    max_prompt_tokens: int | None = None
    min_prompt_tokens: int | None = None
    tags: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()

    def matches(self, request: ModelRequest) -> bool:
        if self.max_prompt_tokens is not None and request.prompt_tokens > self.max_prompt_tokens:
            return False
        if self.min_prompt_tokens is not None and request.prompt_tokens < self.min_prompt_tokens:
            return False
        if self.tags and not any(t in self.tags for t in request.tags):
            return False
        return not (self.agents and request.agent not in self.agents)


class Router:
    """Maps a request to its group chain: (primary group, fallbacks...)."""

    def __init__(
        self,
        rules: Sequence[RoutingRule],
        *,
        default_group: str,
        groups: Sequence[str],
        fallback: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        known = set(groups)
        if default_group not in known:
            raise ConfigError(f"default group {default_group!r} has no backends")
        for rule in rules:
            if rule.group not in known:
                raise ConfigError(f"routing rule names group {rule.group!r}, which has no backends")
        self.rules = tuple(rules)
        self.default_group = default_group
        self._chains: dict[str, tuple[str, ...]] = {}
        for g in groups:
            rest = fallback.get(g) if fallback is not None else None
            if rest is None:
                rest = [o for o in groups if o != g]
            unknown = set(rest) - known
            if unknown:
                raise ConfigError(f"fallback of {g!r} names unknown groups {sorted(unknown)}")
            self._chains[g] = (g, *(o for o in rest if o != g))

    def chain(self, request: ModelRequest) -> tuple[str, ...]:
        """The groups that may serve ``request``, in order of preference."""
        for rule in self.rules:
            if rule.matches(request):
                return self._chains[rule.group]
        return self._chains[self.default_group]
