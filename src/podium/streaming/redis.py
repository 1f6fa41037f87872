"""The token channel over Redis pub/sub: workers publish, gateways on any machine listen.

Channels (``podium`` is the configurable prefix)::

    podium:tokens:{run_id}   the run's deltas, each message a MessagePack list of them
    podium:tokens:listen     listeners' announcements: run ids separated by spaces

and one key, ``podium:tokens:listeners``: a sorted set of the runs announced, each
scored with the time its announcement lapses (it expires with the last gateway).

A gateway subscribes to the run's channel (and waits for Redis to confirm it)
before it reads the run's journal, then announces the run on the listen channel,
and again every ``announce_s`` while the listener stays. Every channel hears the
announcements on one pub/sub connection per process and keeps the run ids heard
within the last three periods: :meth:`RedisTokenChannel.listening` is a lookup in
that table, so a worker decides each step without a round trip. A channel that
starts (a worker just started, or back after Redis was away) reads the sorted set
once after subscribing to the announcements: it streams its first runs to the
listeners announced before it was there, not only from their next announcement
(up to ``announce_s`` later, by when a short run has ended). A publish that
reached nobody (PUBLISH answers how many received it) drops the run from the
table at once, so a client that hangs up stops the streaming at the next step.

Publishing never waits: deltas queue in memory and one task sends whatever has
accumulated in one pipeline, so under load several deltas travel in one message.
While Redis is away deltas are dropped (the journal still has every turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from podium.lifecycle import stop_task
from podium.streaming.base import (
    DEFAULT_BUFFER,
    TokenChannel,
    TokenDelta,
    TokenSubscription,
    drop_subscriber,
)

__all__ = ("RedisTokenChannel",)

log = logging.getLogger("podium.streaming")

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[TokenDelta]).decode
#: How long a subscribe waits for Redis to confirm it before going on regardless.
_CONFIRM_S = 2.0
#: How long the end of a streamed model call waits for its last deltas to leave, at most.
_FLUSH_S = 1.0
_ERRORS = (RedisError, OSError)


class RedisTokenChannel(TokenChannel):
    """Token deltas over Redis pub/sub; see the module docstring for the protocol.

    ``client`` may be shared with the store (pub/sub takes a connection of its own
    from the client's pool). Example::

        channel = RedisTokenChannel("redis://127.0.0.1:6379/0")
        await channel.start()          # a worker: hear listeners from now on
        engine.tokens = channel
    """

    def __init__(
        self,
        client: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "podium",
        announce_s: float = 5.0,
        buffer: int = DEFAULT_BUFFER,
    ) -> None:
        if isinstance(client, str):
            from podium.store.redis_connect import connect

            client = connect(client)
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        self.prefix = prefix
        self.announce_s = announce_s
        self._buffer = buffer
        self._data = f"{prefix}:tokens:"
        self._listen = f"{prefix}:tokens:listen"
        self._listeners = f"{prefix}:tokens:listeners"
        self._subs: dict[str, list[TokenSubscription]] = {}
        self._subscribed: set[str] = set()  # runs whose channel this connection subscribes
        self._confirm: dict[str, asyncio.Future[None]] = {}
        self._heard: dict[str, float] = {}
        self._outbox: dict[str, list[TokenDelta]] = {}
        self._outbox_ready = asyncio.Event()
        self._sent = asyncio.Event()  # set while nothing published waits to be sent
        self._sent.set()
        self._lock = asyncio.Lock()
        self._pubsub: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._syncs: set[asyncio.Task[None]] = set()
        self._starting: asyncio.Task[None] | None = None
        self._warned = 0.0

    # -- the engine's side -------------------------------------------------------------------

    def listening(self, run_id: str) -> bool:
        return run_id in self._heard

    def publish(self, run_id: str, delta: TokenDelta) -> None:
        box = self._outbox.get(run_id)
        if box is None:
            self._outbox[run_id] = [delta]
            self._sent.clear()
            self._outbox_ready.set()
        elif len(box) < self._buffer:  # Redis slow or away: drop, never grow without bound
            box.append(delta)

    async def flush(self) -> None:
        """Wait (up to ``_FLUSH_S``) until the deltas published so far have been sent:
        the step's journal entry, written next, then never overtakes its last tokens."""
        if not self._sent.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent.wait(), _FLUSH_S)

    async def _flush_loop(self) -> None:
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            box, self._outbox = self._outbox, {}
            if box:
                await self._send(box)
            if not self._outbox:
                self._sent.set()

    async def _send(self, box: dict[str, list[TokenDelta]]) -> None:
        runs = list(box)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for run_id in runs:
                    pipe.publish(self._data + run_id, _encode(box[run_id]))
                received = await pipe.execute()
        except _ERRORS as exc:
            self._warn(f"token deltas of {len(runs)} run(s) dropped: {exc}")
            return
        for run_id, count in zip(runs, received, strict=True):
            if count == 0:  # nobody listens any more: stop streaming it next step
                self._heard.pop(run_id, None)

    # -- the gateway's side ------------------------------------------------------------------

    async def subscribe(self, run_id: str) -> TokenSubscription:
        await self.start()
        sub = TokenSubscription(run_id, self._unsubscribe, self._buffer)
        self._subs.setdefault(run_id, []).append(sub)
        try:
            await self._sync(run_id)
            await self._announce([run_id])
        except BaseException:
            sub.close()
            raise
        return sub

    def _unsubscribe(self, sub: TokenSubscription) -> None:
        if drop_subscriber(self._subs, sub):
            task = asyncio.get_running_loop().create_task(self._quiet_sync(sub.run_id))
            self._syncs.add(task)
            task.add_done_callback(self._syncs.discard)

    async def _quiet_sync(self, run_id: str) -> None:
        try:
            await self._sync(run_id)
        except _ERRORS as exc:  # the reconnect resubscribes only what is still wanted
            log.debug("unsubscribe of %s failed: %s", run_id, exc)

    async def _sync(self, run_id: str) -> None:
        """Bring the connection's subscription of ``run_id`` level with its local listeners.

        Serialized, so a close racing a new subscribe never leaves the run unsubscribed.
        """
        async with self._lock:
            wanted = run_id in self._subs
            if wanted == (run_id in self._subscribed):
                return
            channel = self._data + run_id
            if not wanted:
                self._subscribed.discard(run_id)
                await self._pubsub.unsubscribe(channel)
                return
            confirmed = asyncio.get_running_loop().create_future()
            self._confirm[channel] = confirmed
            try:
                await self._pubsub.subscribe(channel)
                self._subscribed.add(run_id)
                # Confirmed by Redis before the caller reads the journal: no delta falls
                # between what the journal holds and what the subscription receives.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(confirmed), _CONFIRM_S)
            finally:
                self._confirm.pop(channel, None)

    # -- background --------------------------------------------------------------------------

    async def start(self) -> None:
        starting = self._starting
        if starting is None or (starting.done() and not self._tasks):  # never, or it failed
            starting = self._starting = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(starting)

    async def _start(self) -> None:
        pubsub: Any = self.client.pubsub()
        try:
            await pubsub.subscribe(self._listen)
        except BaseException:
            await pubsub.aclose()  # Redis away: the next start() tries again
            raise
        self._pubsub = pubsub
        await self._learn_listeners()  # after subscribing: no announcement falls between
        self._tasks = [
            asyncio.create_task(self._read_loop(), name="podium-tokens-read"),
            asyncio.create_task(self._announce_loop(), name="podium-tokens-announce"),
            asyncio.create_task(self._flush_loop(), name="podium-tokens-flush"),
        ]

    async def _read_loop(self) -> None:
        pubsub = self._pubsub
        failures = 0
        while True:
            try:
                message = await pubsub.get_message(timeout=None)
            except _ERRORS as exc:  # redis-py reconnects and resubscribes on the next read
                failures += 1
                self._warn(f"token channel: {exc}")
                await asyncio.sleep(min(2.0, 0.05 * 2**failures))
                continue
            if failures:  # back: the announcements made meanwhile were not heard
                failures = 0
                self._spawn(self._learn_listeners())
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        channel = message["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else str(channel)
        if kind == "message":
            data = message["data"]
            if channel == self._listen:
                now = time.monotonic()
                for run_id in data.decode().split():
                    self._heard[run_id] = now
                return
            subs = self._subs.get(channel.removeprefix(self._data))
            if subs:
                try:
                    deltas = _decode(data)
                except msgspec.DecodeError:
                    return
                for sub in subs:
                    sub.feed(deltas)
        elif kind == "subscribe":
            confirmed = self._confirm.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)

    async def _announce_loop(self) -> None:
        while True:
            await asyncio.sleep(self.announce_s)
            stale = time.monotonic() - 3 * self.announce_s
            for run_id in [r for r, t in self._heard.items() if t < stale]:
                del self._heard[run_id]
            if self._subs:
                try:
                    await self._announce(list(self._subs))
                except _ERRORS as exc:
                    self._warn(f"token listeners not announced: {exc}")

    async def _announce(self, runs: list[str]) -> None:
        """Tell the workers listening now (pub/sub) and those that start later (the sorted
        set, whose lapsed entries go at each announcement: it holds live listeners only)."""
        lapse_s = 3 * self.announce_s
        now = time.time()
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.publish(self._listen, " ".join(runs))
            pipe.zadd(self._listeners, dict.fromkeys(runs, now + lapse_s))
            pipe.zremrangebyscore(self._listeners, "-inf", now)
            pipe.expire(self._listeners, math.ceil(lapse_s) + 1)
            await pipe.execute()

    async def _learn_listeners(self) -> None:
        """The runs announced within the last three periods, as if heard just now."""
        try:
            runs = await self.client.zrangebyscore(self._listeners, time.time(), "+inf")
        except _ERRORS as exc:  # announcements still come in; the next start reads again
            self._warn(f"token listeners not read: {exc}")
            return
        now = time.monotonic()
        for run_id in runs:
            self._heard[run_id.decode() if isinstance(run_id, bytes) else str(run_id)] = now

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._syncs.add(task)
        task.add_done_callback(self._syncs.discard)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned > 10.0:  # once per 10 s: an outage is one line, not thousands
            self._warned = now
            log.warning("%s", message)

    async def aclose(self) -> None:
        for task in [*self._tasks, *self._syncs]:
            await stop_task(task)
        if self._starting is not None and not self._starting.done():
            await stop_task(self._starting)  # (a start that failed has said so already)
        if self._pubsub is not None:
            with contextlib.suppress(*_ERRORS):
                await self._pubsub.aclose()
        if self._own_client:
            await self.client.aclose()
