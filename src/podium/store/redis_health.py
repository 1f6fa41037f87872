"""Whether the Redis under a store takes writes now: what readiness reports.

A read alone says "ready" while Redis refuses every write (``maxmemory`` reached with
``noeviction``, a read-only replica after a failover) or deletes keys under memory
pressure (an evicting ``maxmemory-policy`` set while Podium runs): a load balancer then
keeps sending requests to a gateway that can only answer 503, or runs vanish. So the
probe is a small write, a ``SET`` with an expiry on one key of Podium's own, and the
policy read from ``INFO memory`` (which managed Redis services keep, unlike ``CONFIG``),
pipelined in one round trip. Its answer is kept ``cache_s`` so probes (a load
balancer's, every worker's) cost Redis one command pair a second or two at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from podium.store.redis_preflight import EVICTING_HINT, evicting_policy
from podium.store.redis_replies import refusal_reason

__all__ = ("RedisHealth", "SyncRedisHealth")

log = logging.getLogger("podium.redis")

_PROBE_TTL_MS = 10_000  # the probe key lives this long after the last probe


class _Verdict:
    """The answer of a probe, kept ``cache_s``, a change of it logged once."""

    def __init__(self, key: str, allow_evicting: bool, cache_s: float) -> None:
        self.key = key
        self.allow_evicting = allow_evicting
        self.cache_s = cache_s
        self._answer: str | None = None
        self._fresh_until = 0.0  # time.monotonic() until which the answer is reused
        self._warned_policy: str | None = None

    def _fresh(self) -> bool:
        return time.monotonic() < self._fresh_until

    def _judge(self, written: Any, info: Any) -> str | None:
        if isinstance(written, BaseException):  # alive, but the write was refused
            reason = refusal_reason(written)
            return f"{reason}: {written}" if reason else f"a write failed: {written}"
        policy = info.get("maxmemory_policy") if isinstance(info, dict) else None
        if evicting_policy(policy):
            why = f"maxmemory-policy is {policy}: {EVICTING_HINT}"
            if not self.allow_evicting:
                return why
            if self._warned_policy != policy:  # allowed: said once, not refused
                self._warned_policy = policy
                log.warning("redis %s", why)
        return None

    def _failed(self, exc: BaseException) -> str:
        return refusal_reason(exc) or f"redis unavailable: {exc}"

    def _settle(self, answer: str | None) -> str | None:
        if answer != self._answer:
            if answer is not None:
                log.error("the store is not ready: %s", answer)
            else:
                log.warning("the store is ready again (was: %s)", self._answer)
        self._answer = answer
        self._fresh_until = time.monotonic() + self.cache_s
        return answer


class RedisHealth(_Verdict):
    """The cached answer to "can the store write now?": None, or why not.

    ``allow_evicting``: an evicting ``maxmemory-policy`` is the operator's choice
    (``server.allow_evicting_redis``): logged once, not a reason to refuse traffic.
    A change of the answer is logged once (an error when writes stop, a warning when
    they resume), however often it is asked.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        *,
        allow_evicting: bool = False,
        cache_s: float = 1.5,
        timeout_s: float = 1.0,
    ) -> None:
        super().__init__(f"{prefix}:health", allow_evicting, cache_s)
        self.client = client
        self.timeout_s = timeout_s
        self._probing: asyncio.Future[str | None] | None = None

    async def problem(self) -> str | None:
        """Why writes would fail now (None: they would not); asked of Redis at most once
        per ``cache_s``, and once for any number of callers asking together."""
        if self._fresh():
            return self._answer
        if self._probing is None or self._probing.done():  # (one whose askers all left)
            self._probing = asyncio.ensure_future(self._probe())
        probing = self._probing
        try:
            return await asyncio.shield(probing)
        finally:
            if probing.done() and self._probing is probing:
                self._probing = None

    async def aclose(self) -> None:
        """Stop a probe still under way (its askers left)."""
        probing, self._probing = self._probing, None
        if probing is not None and not probing.done():
            probing.cancel()
            with contextlib.suppress(BaseException):
                await probing

    async def _probe(self) -> str | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                pipe = self.client.pipeline(transaction=False)
                pipe.set(self.key, b"1", px=_PROBE_TTL_MS)
                pipe.info("memory")
                written, info = await pipe.execute(raise_on_error=False)
            answer = self._judge(written, info)
        except TimeoutError:
            answer = f"redis did not answer within {self.timeout_s:g}s"
        except (RedisError, OSError) as exc:
            answer = self._failed(exc)
        return self._settle(answer)


class SyncRedisHealth(_Verdict):
    """:class:`RedisHealth` for a process without an event loop (a supervisor of worker
    processes answering ``/readyz`` from its endpoint's threads)."""

    def __init__(
        self, url: str, prefix: str, *, allow_evicting: bool = False, cache_s: float = 1.5,
        timeout_s: float = 1.0,
    ) -> None:
        import redis

        super().__init__(f"{prefix}:health", allow_evicting, cache_s)
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None
        )
        self._lock = threading.Lock()

    def problem(self) -> str | None:
        with self._lock:  # one probe at a time; the others take its answer
            if self._fresh():
                return self._answer
            try:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(self.key, b"1", px=_PROBE_TTL_MS)
                pipe.info("memory")
                written, info = pipe.execute(raise_on_error=False)
                answer = self._judge(written, info)
            except (RedisError, OSError) as exc:
                answer = self._failed(exc)
            return self._settle(answer)

    def close(self) -> None:
        self.client.close()
