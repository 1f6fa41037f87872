"""``[[models]]`` of ``podium.toml``: each entry an OpenAI-compatible endpoint, entries of
one name a pool of them (see :mod:`podium.factory`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from podium.config import Config, ModelConfig
from podium.errors import ConfigError
from podium.models.base import Model

if TYPE_CHECKING:
    from podium.models.openai import OpenAIChatModel


__all__ = ("OPENAI_DEFAULT_BASE_URL", "POOL_KEYS", "build_models", "openai_endpoint")

#: Where the OpenAI SDK sends requests when ``OPENAI_BASE_URL`` is unset; we do the same.
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"

log = logging.getLogger("podium.factory")


def _api_key(env_name: str, environ: Mapping[str, str]) -> str | None:
    return environ.get(env_name) or None


def openai_endpoint(cfg: ModelConfig, environ: Mapping[str, str]) -> OpenAIChatModel:
    from podium.models.openai import OpenAIChatModel
    from podium.models.resilience import Timeouts

    base_url = cfg.base_url or environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_BASE_URL
    timeouts = Timeouts(
        total_s=Timeouts().total_s if cfg.timeout_s is None else cfg.timeout_s,
        token_idle_s=cfg.idle_timeout_s,
        first_token_s=cfg.first_token_timeout_s,
    )
    model = OpenAIChatModel(
        base_url,
        cfg.model,
        api_key=_api_key(cfg.api_key_env, environ),
        stream=cfg.stream,
        extra_body=cfg.extra_body,
        timeouts=timeouts,
        structured_output=cfg.structured_output,
        provider=cfg.provider,
        server=cfg.kind,
        response_format=cfg.response_format,
        tool_choice=cfg.tool_choice,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
    )
    if cfg.health_path is not None:
        import yarl

        root = model.base_url.removesuffix("/v1")
        path = cfg.health_path if cfg.health_path.startswith("/") else "/" + cfg.health_path
        # The client probes its list of health URLs in order; the file names the one to use.
        model._health_urls = [yarl.URL(root + path)]
    return model


def build_models(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, Model]:
    """One :class:`BackendPool` per ``[[models]]`` name, over that name's endpoints."""
    if not config.models:
        return {}
    from podium.models.pool import Backend, BackendPool
    from podium.models.pool_routing import RoutingRule

    env = os.environ if environ is None else environ
    by_name: dict[str, list[ModelConfig]] = {}
    for m in config.models:
        by_name.setdefault(m.name, []).append(m)
    models: dict[str, Model] = {}
    for name, entries in by_name.items():
        backends = [
            Backend(
                openai_endpoint(m, env),
                capacity=m.capacity,
                group=m.group,
                name=f"{name}#{i}" if len(entries) > 1 else name,
                health=None if m.health_check else _no_probe,
            )
            for i, m in enumerate(entries)
        ]
        rules: list[RoutingRule] = []
        for m in entries:
            if m.tags:
                rules.append(RoutingRule(m.group, tags=tuple(m.tags)))
            rules.extend(
                RoutingRule(
                    m.group,
                    max_prompt_tokens=r.max_prompt_tokens,
                    min_prompt_tokens=r.min_prompt_tokens,
                    tags=tuple(r.tags),
                    agents=tuple(r.agents),
                )
                for r in m.routing
            )
        routed = {r.group for r in rules}
        default = next((m.group for m in entries if m.group not in routed), entries[0].group)
        first = _pool_settings(name, entries)
        models[name] = BackendPool(
            backends,
            rules=rules,
            default_group=default,
            name=name,
            health_interval_s=first.health_interval_s,
            health_timeout_s=first.health_timeout_s,
            unhealthy_after=first.unhealthy_after,
            healthy_after=first.healthy_after,
            eject_s=first.cooldown_s,
            healthy_wait_s=first.healthy_wait_s,
        )
    return models


#: ``[[models]]`` keys that belong to the pool of a name, not to one endpoint of it.
POOL_KEYS = (
    "health_interval_s",
    "health_timeout_s",
    "unhealthy_after",
    "healthy_after",
    "cooldown_s",
    "healthy_wait_s",
)


def _pool_settings(name: str, entries: Sequence[ModelConfig]) -> ModelConfig:
    """The entry whose pool keys the pool takes: the first; the others must agree with
    it (two values for one pool would leave one of them silently unused)."""
    first = entries[0]
    for other in entries[1:]:
        for key in POOL_KEYS:
            if getattr(other, key) != getattr(first, key):
                raise ConfigError(
                    f"[[models]] {name!r}: {key} is the pool's, and its entries disagree"
                    f" ({getattr(first, key)!r} and {getattr(other, key)!r}): give every"
                    " entry of the name the same value"
                )
    return first


async def _no_probe(timeout_s: float) -> bool:
    """``health_check = false``: no probe; real calls tell a dead endpoint (it is drained
    when one fails because it went away)."""
    return True
