"""The operator key a server makes when no API key is configured: one key per deployment.

A random key per process was fine for one process, and wrong for a fleet: behind a
load balancer, the key one gateway replica printed got a 401 from the next. So the key
is made once and kept where every replica (and the next start) finds it, as a digest
only (like every key at rest, see :mod:`podium.gateway.auth`):

- distributed (Redis): ``<prefix>:admin-key`` holds ``sha256:<hex>``, written with
  ``SET NX``: the replica whose write lands prints the key; every other replica, and
  every later start, accepts that key and prints where it came from. A gateway that
  starts while Redis is away serves anyway (it can do nothing without Redis) and reads
  or makes the key in a background thread once Redis answers.
- embedded (SQLite): ``<database>.key`` beside the database file, created exclusively
  (``O_EXCL``, mode 0600): printed once, when made, and accepted at every later start.
- ``--store memory``: nothing outlives the process, so a key for this process only.

Redis mode keeps the digest as long as Redis keeps its data (use AOF, as for the runs):
a Redis that lost it makes the next gateway to start make a new key, which the replicas
started before do not know until they restart.

Lost the printed key? Delete the digest (``redis-cli DEL <prefix>:admin-key``, or the
file) and restart: a new key is made and printed. Configured keys always win: with any
key in ``[[keys]]`` or ``PODIUM_KEYS`` none of this happens.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from podium.errors import ConfigError
from podium.gateway.auth import generate_key, hash_key

if TYPE_CHECKING:
    from redis import Redis

__all__ = (
    "FirstKey",
    "RedisAwayError",
    "admin_key_name",
    "file_first_key",
    "memory_first_key",
    "share_first_key",
    "shared_first_key",
)

#: How long a gateway waits at start for Redis to read or make the shared key; after
#: that it serves, and keeps trying in the background.
REDIS_PATIENCE_S = 2.0


class RedisAwayError(ConfigError):
    """Redis did not answer within the patience given (it may be starting)."""


@dataclass(frozen=True)
class FirstKey:
    """The operator key to accept: its digest, and the key itself only where it was made
    just now (to print once). ``where`` says where the digest is kept."""

    digest: str
    key: str | None
    where: str

    def announcement(self) -> str:
        """The line ``podium serve`` prints about it."""
        if self.key is not None:
            kept = f" (kept as a digest in {self.where})" if self.where else ""
            return f"podium: no API keys configured; for tenant 'default' use: {self.key}{kept}"
        return (
            "podium: no API keys configured; for tenant 'default' use the key printed when "
            f"it was made (its digest is in {self.where}; delete it and restart for a new one)"
        )


def admin_key_name(prefix: str) -> str:
    """The Redis key holding the digest of a deployment's first operator key."""
    return f"{prefix}:admin-key"


def memory_first_key() -> FirstKey:
    """A key for this process only (its store does not outlive it either)."""
    key = generate_key()
    return FirstKey(hash_key(key), key, "")


def key_file_of(database: str) -> Path:
    """Where an embedded server keeps its first key's digest: beside its SQLite file."""
    return Path(database + ".key")


def file_first_key(database: str) -> FirstKey:
    """The digest kept beside ``database`` (an SQLite path), made now if there is none."""
    path = key_file_of(database)
    for _ in range(3):  # made, read, or (a half-written file removed meanwhile) made again
        key = generate_key()
        digest = hash_key(key)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            stored = _read_digest(path)
            if stored is not None:
                return FirstKey(stored, None, str(path))
            continue
        except OSError as exc:
            raise ConfigError(f"cannot create the key file {path}: {exc.strerror}") from exc
        with os.fdopen(fd, "w") as f:
            f.write(digest + "\n")
        return FirstKey(digest, key, str(path))
    raise ConfigError(
        f"{path} does not hold a key digest (sha256:<64 hex>); delete it to make a new key"
    )


def _read_digest(path: Path) -> str | None:
    # A file another server is writing right now may be empty for an instant: wait a little.
    for attempt in range(20):
        with contextlib.suppress(FileNotFoundError):
            try:
                text = path.read_text().strip()
            except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the key file {path}: {exc}") from exc
            if _is_digest(text):
                return text
            if text:
                break
        time.sleep(0.01 * (attempt + 1))
    return None


def _is_digest(text: str) -> bool:
    hexpart = text.removeprefix("sha256:")
    return (
        text.startswith("sha256:")
        and len(hexpart) == 64
        and all(c in "0123456789abcdef" for c in hexpart)
    )


def shared_first_key(url: str, prefix: str, *, patience_s: float = REDIS_PATIENCE_S) -> FirstKey:
    """The deployment's key digest in Redis, made now (``SET NX``) if there is none.

    Waits up to ``patience_s`` for Redis (a fleet often starts its gateways before
    Redis answers), then raises ConfigError: without Redis no replica can know the key.
    """
    import redis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    name = admin_key_name(prefix)
    where = f"Redis key {name}"
    client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    deadline = time.monotonic() + patience_s
    delay = 0.1
    try:
        while True:
            try:
                return _read_or_make(client, name, where)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if time.monotonic() + delay > deadline:
                    raise RedisAwayError(
                        f"no API keys configured and Redis did not answer for {patience_s:g}s "
                        f"({exc}): the key every gateway shares is kept there; start Redis "
                        "first, or configure keys ([[keys]] in podium.toml, or PODIUM_KEYS)"
                    ) from exc
                time.sleep(delay)
                delay = min(2.0, delay * 2)
            except RedisError as exc:  # refused (an ACL without SET, a read-only replica)
                raise ConfigError(
                    f"no API keys configured and {where} cannot be read or made ({exc}); "
                    "configure keys ([[keys]] in podium.toml, or PODIUM_KEYS)"
                ) from exc
    finally:
        client.close()


def _read_or_make(client: Redis, name: str, where: str) -> FirstKey:
    for _ in range(3):  # made, read, or (deleted in between) made again
        key = generate_key()
        digest = hash_key(key)
        if client.set(name, digest, nx=True):
            return FirstKey(digest, key, where)
        stored = client.get(name)
        if stored is None:
            continue
        text = stored.decode() if isinstance(stored, bytes) else str(stored)
        if not _is_digest(text):
            raise ConfigError(
                f"{where} holds {text[:20]!r}, not a key digest (sha256:<64 hex>); "
                f"delete it (redis-cli DEL {name}) to make a new key"
            )
        return FirstKey(text, None, where)
    raise ConfigError(f"{where} kept vanishing while it was read; is another tool deleting it?")


def share_first_key(
    url: str,
    prefix: str,
    accept: Callable[[FirstKey], None],
    *,
    patience_s: float = REDIS_PATIENCE_S,
    retry_cap_s: float = 5.0,
) -> bool:
    """Read or make the deployment's key and ``accept`` it: now, if Redis answers within
    ``patience_s`` (True), else from a daemon thread once it does (False). A Redis that
    refuses (garbage under the key, a read-only replica) raises ConfigError now, and in
    the thread is one line on stderr: then no key is accepted until the next start."""
    try:
        accept(shared_first_key(url, prefix, patience_s=patience_s))
        return True
    except RedisAwayError:
        pass

    def keep_trying() -> None:
        while True:
            try:
                key = shared_first_key(url, prefix, patience_s=retry_cap_s)
            except RedisAwayError:
                continue  # (it waited, backing off, inside)
            except ConfigError as exc:
                print(f"podium serve: error: {exc}", file=sys.stderr, flush=True)
                return
            accept(key)
            return

    threading.Thread(target=keep_trying, name="podium-first-key", daemon=True).start()
    return False
