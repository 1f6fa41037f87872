"""One look at the Redis a gateway or worker is about to use, before it serves.

A Redis that is away is not an error here: it may be starting, and the store and queue
ride out outages. A server that can never work is: a wrong password, a peer that does
not speak Redis, or a database where another application holds keys under Podium's
prefix. Each is one line at start (a :class:`~podium.errors.ConfigError`), where the
alternative was a worker retrying forever, a traceback, or a 500 per request.
"""

from __future__ import annotations

from collections.abc import Iterable

from podium.errors import ConfigError

__all__ = ("EVICTING_HINT", "evicting_policy", "preflight")

#: What to do about an evicting ``maxmemory-policy`` (the start-up refusal and the
#: readiness check both say it).
EVICTING_HINT = (
    "under memory pressure Redis deletes keys, Podium's runs, journals and queue entries "
    "too; set it to noeviction (a full Redis then refuses writes, which Podium waits out), "
    "or accept losing runs with server.allow_evicting_redis = true "
    "(--allow-evicting-redis, PODIUM_SERVER__ALLOW_EVICTING_REDIS=1)"
)


def evicting_policy(policy: str | None) -> bool:
    """Whether ``maxmemory-policy`` lets Redis delete keys (every policy but noeviction:
    the volatile ones delete keys with an expiry, which the queue's version keys and the
    cancel requests have)."""
    return bool(policy) and policy != "noeviction"


def _expected_types(prefix: str, pools: Iterable[str]) -> dict[str, str]:
    """Podium's keys whose names are fixed, and the Redis type each must have."""
    from podium.store.redis_expiry import expiry_key
    from podium.store.redis_keys import dead_stream_key, index_prefix, queue_stream_key

    idx = index_prefix(prefix)
    keys = {f"{idx}all": "zset", f"{idx}thall": "zset", expiry_key(idx): "zset"}
    for pool in pools:
        keys[queue_stream_key(prefix, pool)] = "stream"
        keys[dead_stream_key(prefix, pool)] = "stream"
    return keys


def preflight(
    url: str,
    prefix: str,
    pools: Iterable[str],
    timeout_s: float = 2.0,
    *,
    allow_evicting: bool = False,
) -> str | None:
    """Check the server at ``url``; raise ConfigError if it cannot work (an evicting
    ``maxmemory-policy`` too, unless ``allow_evicting``), return a warning line (no
    answer, an evicting policy allowed) or None."""
    import redis
    from redis.exceptions import (
        AuthenticationError,
        InvalidResponse,
        NoPermissionError,
        RedisError,
        ResponseError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    client = redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None
    )
    where = url.split("@")[-1]  # never the password
    try:
        client.ping()
        kwargs = client.connection_pool.connection_kwargs
        password, username = kwargs.get("password"), kwargs.get("username")
        if password is not None:
            # redis-py lets "AUTH called without any password configured" pass, Podium's
            # own connections (store, queue) do not: asked as they ask, refused here, once,
            # not by a worker retrying its claims forever.
            try:
                client.execute_command(  # type: ignore[no-untyped-call]
                    "AUTH", *((username, password) if username else (password,))
                )
            except ResponseError as exc:
                raise AuthenticationError(str(exc)) from None
        pipe = client.pipeline(transaction=False)
        expected = _expected_types(prefix, pools)
        for key in expected:
            pipe.type(key)
        for (key, want), got in zip(expected.items(), pipe.execute(), strict=True):
            kind = got.decode() if isinstance(got, bytes) else str(got)
            if kind not in ("none", want):
                raise ConfigError(
                    f"{where}: key {key} holds a {kind}, not a {want}: another application "
                    f"uses the prefix {prefix!r} in this database; give Podium a prefix "
                    "(--prefix, server.prefix) or a database of its own"
                )
        try:
            policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
        except ResponseError:  # CONFIG is often renamed away on managed Redis; INFO is not
            try:
                policy = client.info("memory").get("maxmemory_policy")
            except ResponseError:
                return None
        if evicting_policy(policy):
            line = f"{where}: maxmemory-policy is {policy}: {EVICTING_HINT}"
            if not allow_evicting:  # runs would vanish without a word: refused at start
                raise ConfigError(line)
            return line
        return None
    except (AuthenticationError, NoPermissionError) as exc:
        raise ConfigError(
            f"{where}: Redis refused the credentials ({exc}); give the ones it takes in the "
            "URL, redis://[USER]:PASSWORD@HOST:PORT/DB (none for a Redis without a password)"
        ) from None
    except InvalidResponse as exc:
        raise ConfigError(f"{where} does not speak the Redis protocol ({exc})") from None
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        # Away (or starting): not an error, the store and the queue wait for it; but said,
        # or a wrong URL looks like a server that works and has nothing to do.
        return (f"{where} does not answer ({exc}); starting anyway: requests that need it "
                "answer 503 and workers wait for it until it does")
    except RedisError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    finally:
        client.close()
