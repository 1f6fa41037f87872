"""Automatic pipelining on one connection: the Redis commands of many runs, written together.

redis-py holds one connection per command in flight, so a worker driving 256
runs would open 256 sockets and pay a coroutine, a timeout scope and a system
call pair per checkpoint. An :class:`Autopipeline` queues each command with a
future; at the end of the loop turn everything queued is packed by hiredis (C)
and written at once to a single connection, whose replies hiredis parses and
hands back in order. No coroutine runs per command, and batches do not wait
for each other: the connection carries as many as are in flight.

If the connection drops, the commands without a reply are sent again after a
reconnect with jittered exponential backoff, which is why every write Podium
sends is idempotent. A command that has waited ``unavailable_s`` for a
connection (or after ``retries`` failed reconnects) fails with the connection
error, so callers learn quickly that Redis is away; the next command tries to
connect again, so the pipeline works again as soon as Redis is back. Scripts
are called by SHA; after a Redis restart (NOSCRIPT) they are loaded and the
refused command sent again. Blocking reads
(XREADGROUP, XREAD BLOCK) do not belong here: they use the redis-py client.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from typing import Any, cast

import hiredis
import redis.asyncio as aioredis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from podium.errors import ConfigError

__all__ = ("Autopipeline",)


class _Op:
    __slots__ = ("args", "born", "fut", "internal", "packed", "retries", "sent_at")

    def __init__(
        self, args: tuple[Any, ...], fut: asyncio.Future[Any], internal: bool = False
    ) -> None:
        self.args = args
        # Packed here, in the caller's turn, not when the batch is written: an argument
        # that cannot be sent (a str with a lone surrogate, an unsupported type) fails
        # its own caller, instead of raising out of the flush after the batch was listed
        # as waiting for replies, which hung every command of the batch and paired later
        # replies with the wrong commands.
        self.packed: bytes = hiredis.pack_command(args)
        self.fut = fut
        self.internal = internal  # connection set-up (AUTH, SELECT, SCRIPT LOAD): not resent
        self.born = time.monotonic()
        self.sent_at = 0.0
        self.retries = 0


class _Protocol(asyncio.Protocol):
    """Replies, in order, to the ops written on this connection."""

    def __init__(self, owner: Autopipeline) -> None:
        self.owner = owner
        self.reader = hiredis.Reader()
        self.waiting: deque[_Op] = deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            op = self.waiting.popleft()
            if isinstance(reply, hiredis.ReplyError):
                message = str(reply)
                if message.startswith("NOSCRIPT"):
                    self.owner._reload_and_resend(op)
                    continue
                if message.startswith(("LOADING", "BUSY", "TRYAGAIN")):
                    # A restarted Redis replaying its AOF (or busy with a script): not an
                    # answer, a "come back soon". Resend with backoff like a lost link.
                    self.owner._resend_later(op, message)
                    continue
                reply = ResponseError(message)
                if not op.fut.done():
                    op.fut.set_exception(reply)
            elif not op.fut.done():
                op.fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.owner._lost(self)


class Autopipeline:
    """Send the commands of one loop turn as one write on one connection."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        retries: int = 10,
        timeout: float = 10.0,
        unavailable_s: float = 1.5,
    ) -> None:
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        if pool.connection_class is not aioredis.Connection:
            # TLS and unix sockets would need their own transport here; not built yet.
            raise ConfigError(
                f"{pool.connection_class.__name__} is not supported: use a redis:// TCP URL"
            )
        self.host: str = kwargs.get("host", "127.0.0.1")
        self.port: int = int(kwargs.get("port", 6379))
        self.db: int = int(kwargs.get("db", 0) or 0)
        self.username: str | None = kwargs.get("username")
        self.password: str | None = kwargs.get("password")
        self.retries = retries
        self.timeout = timeout
        self.unavailable_s = unavailable_s
        self._backoff = ExponentialWithJitterBackoff(cap=min(2.0, unavailable_s / 3), base=0.05)
        self._scripts: dict[str, str] = {}
        self._queue: list[_Op] = []
        self._flush_scheduled = False
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.commands = 0

    def register(self, script: str) -> str:
        """Remember a Lua script; returns the SHA to call it by (``EVALSHA``)."""
        sha = hashlib.sha1(script.encode()).hexdigest()
        self._scripts[sha] = script
        return sha

    # -- submitting -------------------------------------------------------------------------

    def submit(self, *args: Any) -> asyncio.Future[Any]:
        """Queue a command; the future gets its reply (or its error)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        op = _Op(args, fut)  # raises (ValueError, TypeError) before anything is queued
        self._queue.append(op)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return fut

    async def execute(self, *args: Any) -> Any:
        return await self.submit(*args)

    async def execute_all(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Several commands in one batch; their replies in order.

        If one fails, the others are dropped (or their errors marked as seen), so no
        error is left in a future nobody awaits.
        """
        futs: list[asyncio.Future[Any]] = []
        try:
            # Appended one by one: one that cannot be packed drops those before it.
            futs.extend(self.submit(*command) for command in commands)
            return [await fut for fut in futs]
        finally:
            for fut in futs:
                if not fut.done():
                    fut.cancel()
                elif not fut.cancelled():
                    fut.exception()  # retrieved: it is the caller's error, or moot
    def _flush(self) -> None:
        self._flush_scheduled = False
        protocol = self._protocol
        if protocol is None or protocol.transport is None:
            self._connect_soon()
            return
        batch, self._queue = self._queue, []
        batch = [op for op in batch if not op.fut.done()]  # callers cancelled meanwhile
        if not batch:
            return
        now = time.monotonic()
        for op in batch:
            op.sent_at = now
        protocol.waiting.extend(batch)
        protocol.transport.write(b"".join([op.packed for op in batch]))
        self.batches += 1
        self.commands += len(batch)
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().call_later(self.timeout, self._check)

    def _check(self) -> None:
        """A reply overdue by ``timeout`` means a dead link: drop it, resend on a new one."""
        self._watchdog = None
        protocol = self._protocol
        if protocol is None or not protocol.waiting:
            return
        if time.monotonic() - protocol.waiting[0].sent_at > self.timeout:
            if protocol.transport is not None:
                protocol.transport.abort()
            return
        self._watchdog = asyncio.get_running_loop().call_later(self.timeout, self._check)

    def _reload_and_resend(self, op: _Op) -> None:
        async def reload() -> None:
            try:
                for script in self._scripts.values():
                    await self._connected_call("SCRIPT", "LOAD", script)
            except RedisConnectionError:  # the link dropped: send it again once reconnected
                if not op.fut.done():
                    self._queue.insert(0, op)
                    self._connect_soon()
                return
            except Exception as exc:
                if not op.fut.done():
                    op.fut.set_exception(NoScriptError(str(exc)))
                return
            self._queue.insert(0, op)
            self._flush()

        task = asyncio.get_running_loop().create_task(reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _resend_later(self, op: _Op, why: str) -> None:
        op.retries += 1
        if op.retries > self.retries or self._overdue(op, time.monotonic()):
            if not op.fut.done():
                # What went wrong, without "redis unavailable": the store and the queue
                # translate the error and say that themselves.
                op.fut.set_exception(RedisConnectionError(why))
            return

        def again() -> None:
            if not op.fut.done() and not self._closed:
                self._queue.append(op)
                self._flush()

        asyncio.get_running_loop().call_later(self._backoff.compute(op.retries), again)

    async def _connected_call(self, *args: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        protocol = self._protocol
        if protocol is None or protocol.transport is None:
            raise RedisConnectionError("not connected")
        op = _Op(args, fut, internal=True)
        protocol.waiting.append(op)
        protocol.transport.write(op.packed)
        reply = await fut
        return reply

    # -- connection -------------------------------------------------------------------------

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
        unanswered = []
        for op in protocol.waiting:
            if op.fut.done():
                continue
            if op.internal:  # its caller (a connect or a script load) decides what next
                op.fut.set_exception(RedisConnectionError("connection lost"))
            else:
                unanswered.append(op)
        protocol.waiting.clear()
        self._queue[:0] = unanswered  # sent again, in order, once reconnected
        if self._queue and not self._closed:
            self._connect_soon()

    def _connect_soon(self) -> None:
        if self._connecting is None and not self._closed:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    _, protocol = await asyncio.wait_for(
                        loop.create_connection(lambda: _Protocol(self), self.host, self.port),
                        min(self.timeout, self.unavailable_s),
                    )
                    self._protocol = protocol
                    if self.password is not None:
                        auth = (self.username, self.password) if self.username else (
                            self.password,
                        )
                        await self._connected_call("AUTH", *auth)
                    if self.db:
                        await self._connected_call("SELECT", self.db)
                    break
                except (OSError, TimeoutError, RedisConnectionError) as exc:
                    self._protocol = None
                    failures += 1
                    error = RedisConnectionError(
                        str(exc) or f"no connection to {self.host}:{self.port} in time"
                    )
                    if failures > self.retries:
                        self._fail_queued(error)
                    else:
                        self._fail_overdue(error)
                    if not self._queue:  # nobody waits: the next command connects again
                        return
                    # back off, but wake in time to fail the oldest command when it is due
                    due = min(op.born for op in self._queue) + self.unavailable_s
                    delay = min(self._backoff.compute(failures), due - time.monotonic())
                    await asyncio.sleep(max(0.005, delay))
        finally:
            self._connecting = None
        if self._queue:
            self._flush()

    def _overdue(self, op: _Op, now: float) -> bool:
        return now - op.born >= self.unavailable_s

    def _fail_overdue(self, exc: Exception) -> None:
        """Fail the commands that have waited ``unavailable_s`` for a connection."""
        now = time.monotonic()
        keep: list[_Op] = []
        for op in self._queue:
            if op.fut.done():
                continue
            if self._overdue(op, now):
                op.fut.set_exception(exc)
            else:
                keep.append(op)
        self._queue = keep

    def _fail_queued(self, exc: Exception) -> None:
        queued, self._queue = self._queue, []
        for op in queued:
            if not op.fut.done():
                op.fut.set_exception(exc)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._connecting is not None:
            self._connecting.cancel()
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
        self._fail_queued(RedisConnectionError("closed"))

