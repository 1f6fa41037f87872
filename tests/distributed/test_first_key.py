"""With no API key configured, one key per deployment: every gateway replica on a Redis
accepts the key one of them printed, and an embedded server keeps its key across restarts
(printed once, when made). Configured keys still win."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import redis

from podium.errors import ConfigError
from podium.gateway.auth import hash_key
from podium.gateway.first_key import (
    FirstKey,
    admin_key_name,
    file_first_key,
    shared_first_key,
)
from serve_process import start_serve

if TYPE_CHECKING:
    from .redis_server import RedisServer

KEY_LINE = re.compile(r"for tenant 'default' use: (pk_\S+)")
KEPT_LINE = "for tenant 'default' use the key printed when it was made"


def _race(make: Callable[[], FirstKey], n: int = 8) -> list[FirstKey]:
    """``make()`` in ``n`` threads at once."""
    start = threading.Barrier(n)
    results: list[FirstKey] = []

    def one() -> None:
        start.wait()
        results.append(make())

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == n
    return results


def _one_made(results: list[FirstKey]) -> str:
    """The one key made among ``results``; every result accepts it."""
    made = [r.key for r in results if r.key is not None]
    assert len(made) == 1, results
    assert {r.digest for r in results} == {hash_key(made[0])}
    return made[0]


def test_replicas_racing_on_redis_share_one_key(shared_redis_url: str, prefix: str) -> None:
    key = _one_made(_race(lambda: shared_first_key(shared_redis_url, prefix)))
    stored = redis.Redis.from_url(shared_redis_url).get(admin_key_name(prefix))
    assert stored == hash_key(key).encode()  # the digest only, never the key
    again = shared_first_key(shared_redis_url, prefix)  # a restart: the same key, not printed
    assert again.key is None and again.digest == hash_key(key)
    assert key not in again.announcement()


def test_redis_holding_garbage_is_one_line(shared_redis_url: str, prefix: str) -> None:
    redis.Redis.from_url(shared_redis_url).set(admin_key_name(prefix), "hunter2")
    with pytest.raises(ConfigError, match=r"not a key digest .* delete it \(redis-cli DEL"):
        shared_first_key(shared_redis_url, prefix)


def test_redis_away_gives_up_saying_what_to_do() -> None:
    with pytest.raises(ConfigError, match="configure keys"):
        shared_first_key("redis://127.0.0.1:1/0", "p", patience_s=0.3)


def test_an_embedded_key_is_made_once_and_kept(tmp_path: Path) -> None:
    database = str(tmp_path / "podium.sqlite")
    key = _one_made(_race(lambda: file_first_key(database)))
    path = Path(database + ".key")
    assert path.read_text().strip() == hash_key(key)
    assert path.stat().st_mode & 0o777 == 0o600
    again = file_first_key(database)
    assert again.key is None and again.digest == hash_key(key)


def _models(url: str, key: str) -> int:
    r = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return r.status_code


@pytest.mark.slow
def test_two_gateways_on_one_redis_accept_the_same_key(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    args = ["--agent", "support=react", "--port", "0", "--redis", shared_redis_url,
            "--prefix", prefix]
    first = start_serve(args, cwd=tmp_path, env=os.environ)
    try:
        second = start_serve(args, cwd=tmp_path, env=os.environ)
        try:
            match = KEY_LINE.search(first.log)
            assert match, first.log
            assert KEPT_LINE in second.log and not KEY_LINE.search(second.log), second.log
            key = match.group(1)
            assert _models(first.url, key) == 200
            assert _models(second.url, key) == 200
            assert _models(second.url, key + "x") == 401
        finally:
            second.stop()
    finally:
        first.stop()


@pytest.mark.slow
def test_an_embedded_server_keeps_its_key_across_restarts(tmp_path: Path) -> None:
    args = ["--agent", "support=react", "--port", "0", "--store", "sqlite:data.sqlite"]
    first = start_serve(args, cwd=tmp_path, env=os.environ)
    try:
        match = KEY_LINE.search(first.log)
        assert match, first.log
        key = match.group(1)
    finally:
        first.stop()
    second = start_serve(args, cwd=tmp_path, env=os.environ)
    try:
        assert KEPT_LINE in second.log and not KEY_LINE.search(second.log), second.log
        assert "data.sqlite.key" in second.log
        assert _models(second.url, key) == 200
    finally:
        second.stop()


def test_a_read_only_redis_is_one_line(private_redis: RedisServer) -> None:
    client = redis.Redis.from_url(private_redis.url)
    client.config_set("replica-read-only", "yes")
    client.replicaof("127.0.0.1", 1)  # a replica: writes refused
    try:
        with pytest.raises(ConfigError, match=r"cannot be read or made .*read only replica"):
            shared_first_key(private_redis.url, "p", patience_s=1)
    finally:
        client.replicaof("NO", "ONE")
        client.close()


def test_a_key_file_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    database = str(tmp_path / "podium.sqlite")
    Path(database + ".key").mkdir()
    with pytest.raises(ConfigError, match="cannot read the key file"):
        file_first_key(database)
    Path(database + ".key").rmdir()
    Path(database + ".key").write_text("not a digest\n")
    with pytest.raises(ConfigError, match="does not hold a key digest"):
        file_first_key(database)


@pytest.mark.slow
def test_a_gateway_started_before_redis_takes_the_key_once_it_answers(tmp_path: Path) -> None:
    from .redis_server import RedisServer

    redis_server = RedisServer(tmp_path / "redis")
    redis_server.directory.mkdir()
    args = ["--agent", "support=react", "--port", "0", "--redis", redis_server.url]
    gateway = start_serve(args, cwd=tmp_path, env=os.environ)  # Redis not started yet
    try:
        assert "Redis, which does not answer yet" in gateway.log, gateway.log
        redis_server.start()
        deadline = time.monotonic() + 30
        while not (match := KEY_LINE.search(gateway.log)):
            assert time.monotonic() < deadline, gateway.log
            time.sleep(0.05)
        assert _models(gateway.url, match.group(1)) == 200
    finally:
        gateway.stop()
        redis_server.stop()
