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
refused command sent again. A command Redis refused without applying it (OOM,
MISCONF, LOADING: see :mod:`podium.store.redis_replies`) is sent again with backoff
too, and a connection is used only once the server answered a PING (or AUTH/SELECT):
a full server (``maxclients``) is a connection failure, a wrong password or a peer that
is not Redis fails the waiting commands with one clear error. Blocking reads
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
from redis.exceptions import AuthenticationError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from podium.errors import ConfigError
from podium.lifecycle import stop_task
from podium.store.redis_replies import MAX_CLIENTS, RefusalLog, is_transient

__all__ = ("Autopipeline",)


class _Op:
    __slots__ = (
        "args", "born", "fut", "internal", "packed", "refused", "resend_args", "retries",
        "sent_at",
    )

    def __init__(
        self, args: tuple[Any, ...], fut: asyncio.Future[Any], internal: bool = False,
        resend_args: tuple[Any, ...] | None = None,
    ) -> None:
        self.args = args
        # Packed here, in the caller's turn, not when the batch is written: an argument
        # that cannot be sent (a str with a lone surrogate, an unsupported type) fails
        # its own caller, instead of raising out of the flush after the batch was listed
        # as waiting for replies, which hung every command of the batch and paired later
        # replies with the wrong commands.
        self.packed: bytes = hiredis.pack_command(args)
        self.fut = fut
        # What to send instead after a lost connection left its outcome unknown (a
        # command that is not idempotent as it is: XADD with an automatic id).
        self.resend_args = resend_args
        self.internal = internal  # connection set-up (AUTH, SELECT, SCRIPT LOAD): not resent
        self.born = time.monotonic()
        self.sent_at = 0.0
        self.retries = 0
        self.refused: str | None = None  # Redis's last "not now" to it (OOM, READONLY…)


class _Protocol(asyncio.Protocol):
    """Replies, in order, to the ops written on this connection."""

    def __init__(self, owner: Autopipeline) -> None:
        self.owner = owner
        self.reader = hiredis.Reader()
        self.waiting: deque[_Op] = deque()
        self.transport: asyncio.Transport | None = None
        # An error the server sent before any command was written: its refusal of the
        # connection (maxclients), said at once on accept, often before the handshake's
        # first command is even queued. What the handshake then reports.
        self.refused: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        answered = ok = False
        try:
            while (reply := self.reader.gets()) is not False:
                if not self.waiting:  # out of step with our commands: never guess which
                    if isinstance(reply, hiredis.ReplyError) and self.refused is None:
                        self.refused = str(reply)  # a refusal before we asked anything
                    if self.transport is not None:  # reply is whose; start afresh, resend
                        self.transport.abort()
                    return
                op = self.waiting.popleft()
                if isinstance(reply, hiredis.ReplyError):
                    message = str(reply)
                    if message.startswith("NOSCRIPT"):
                        self.owner._reload_and_resend(op)
                        continue
                    if is_transient(message) and not op.internal:
                        # Not an answer but a "come back soon" (a Redis replaying its
                        # AOF, out of memory): it applied nothing. Resend with backoff.
                        self.owner._resend_later(op, message)
                        continue
                    reply = ResponseError(message)
                    if not op.fut.done():
                        op.fut.set_exception(reply)
                else:
                    ok = True
                    answered = answered or op.retries > 0  # a refused command taken now
                    if not op.fut.done():
                        op.fut.set_result(reply)
        except hiredis.ProtocolError as exc:
            self.owner._not_redis(self, exc)
            return
        refusals = self.owner.refusals
        if ok and refusals.why is not None and (
            answered or refusals.quiet_for(self.owner.unavailable_s)
        ):
            refusals.answered()

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
        self._watch_due = 0.0  # when the watchdog fires (time.monotonic())
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.refusals = RefusalLog.of(f"{self.host}:{self.port}")
        self.batches = 0
        self.commands = 0
        #: time.monotonic() since when the connection in use has been up (None: there is
        #: none), and when the last one in use was lost (0.0: never).
        self.up_since: float | None = None
        self.lost_at = 0.0

    def register(self, script: str) -> str:
        """Remember a Lua script; returns the SHA to call it by (``EVALSHA``)."""
        sha = hashlib.sha1(script.encode()).hexdigest()
        self._scripts[sha] = script
        return sha

    # -- submitting -------------------------------------------------------------------------

    def submit(self, *args: Any, resend: tuple[Any, ...] | None = None) -> asyncio.Future[Any]:
        """Queue a command; the future gets its reply (or its error).

        ``resend``: the command to send instead if the connection drops before the reply
        (for a command whose repetition would apply twice)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._closed:  # nothing would ever send it: say so, rather than wait for ever
            fut.set_exception(RedisConnectionError("closed"))
            return fut
        # raises (ValueError, TypeError) before anything is queued
        op = _Op(args, fut, resend_args=resend)
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
        # a transport closing (reset by the server) drops writes with a warning each
        if protocol is None or protocol.transport is None or protocol.transport.is_closing():
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
        # A batch's oldest command is its first (commands queue in the order they come,
        # those a lost link left unanswered go first) or, one refused and sent again, its
        # last: no need to look at the others.
        oldest = min(batch[0].born, batch[-1].born)
        if self._watchdog is None or oldest + self.unavailable_s < self._watch_due:
            self._watch(protocol, now)

    def _watch(self, protocol: _Protocol, now: float) -> None:
        """Check the replies again when the oldest waiting one is overdue, or its caller's
        patience (``unavailable_s``) runs out, whichever comes first."""
        due = protocol.waiting[0].sent_at + self.timeout
        for op in protocol.waiting:  # the oldest caller still waiting (most are answered)
            if not op.fut.done():
                due = min(due, op.born + self.unavailable_s)
                break
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watch_due = due
        self._watchdog = asyncio.get_running_loop().call_later(max(0.001, due - now), self._check)

    def _check(self) -> None:
        """A reply overdue by ``timeout`` means a dead link: drop it, resend on a new one.

        A caller waits ``unavailable_s`` at most, answered or not: a server that
        accepts connections and never replies (stopped, hung, a link that drops packets
        without a reset) fails its commands as unavailable on time, while the link is
        given until ``timeout`` (a slow reply is not a dead link). A failed command
        stays in line: its reply, if it comes, is matched to it and dropped."""
        self._watchdog = None
        protocol = self._protocol
        if protocol is None or not protocol.waiting:
            return
        now = time.monotonic()
        for op in protocol.waiting:
            if not op.fut.done() and not op.internal and self._overdue(op, now):
                op.fut.set_exception(RedisConnectionError(  # refused all along: say so
                    op.refused
                    or f"no reply from {self.host}:{self.port} in {self.unavailable_s:g}s"
                ))
        if now - protocol.waiting[0].sent_at > self.timeout:
            if protocol.transport is not None:
                protocol.transport.abort()
            return
        self._watch(protocol, now)

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
        op.refused = why
        now = time.monotonic()
        if op.retries > self.retries or self._overdue(op, now):
            if not op.fut.done():
                # What went wrong, without "redis unavailable": the store and the queue
                # translate the error and say that themselves.
                op.fut.set_exception(RedisConnectionError(why))
            return
        self.refusals.refused(why, self.unavailable_s)
        # never past the op's patience: it fails on time when the refusals go on
        delay = min(self._backoff.compute(op.retries), op.born + self.unavailable_s - now)

        def again() -> None:
            if not op.fut.done() and not self._closed:
                self._queue.append(op)
                self._flush()

        asyncio.get_running_loop().call_later(max(0.001, delay), again)

    async def _connected_call(self, *args: Any, protocol: _Protocol | None = None) -> Any:
        fut = asyncio.get_running_loop().create_future()
        protocol = protocol or self._protocol
        if protocol is None or protocol.transport is None:
            raise RedisConnectionError((protocol and protocol.refused) or "not connected")
        op = _Op(args, fut, internal=True)
        protocol.waiting.append(op)
        protocol.transport.write(op.packed)
        reply = await fut
        return reply

    # -- connection -------------------------------------------------------------------------

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
            self.up_since = None
            self.lost_at = time.monotonic()
        unanswered = []
        for op in protocol.waiting:
            if op.fut.done():
                continue
            if op.internal:  # its caller (a connect or a script load) decides what next
                op.fut.set_exception(RedisConnectionError(protocol.refused or "connection lost"))
            else:
                if op.resend_args is not None:  # it may have been applied: the safe form
                    op.args, op.resend_args = op.resend_args, None
                    op.packed = hiredis.pack_command(op.args)  # what the flush writes
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
                protocol: _Protocol | None = None
                try:
                    _, opened = await asyncio.wait_for(
                        loop.create_connection(lambda: _Protocol(self), self.host, self.port),
                        min(self.timeout, self.unavailable_s),
                    )
                    protocol = opened
                    await asyncio.wait_for(
                        self._handshake(opened), min(self.timeout, self.unavailable_s)
                    )
                    self._protocol = opened  # commands go out once the server answered
                    self.up_since = time.monotonic()
                    break
                except ResponseError as exc:  # a wrong password, an unknown database…
                    if protocol is not None:
                        self._drop(protocol)
                    self._fail_queued(AuthenticationError(
                        f"redis at {self.host}:{self.port} refused the connection: {exc}"
                    ))
                    return
                except (OSError, TimeoutError, RedisConnectionError) as exc:
                    if protocol is not None:
                        self._drop(protocol)
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
                except BaseException:  # cancelled (aclose) mid-set-up: hang up, not leak it
                    if protocol is not None and protocol is not self._protocol:
                        self._drop(protocol)
                    raise
        finally:
            self._connecting = None
        if self._queue:
            self._flush()

    async def _handshake(self, protocol: _Protocol) -> None:
        """Use a connection once the server has answered: AUTH and SELECT when the URL
        says so, else a PING (a full server's refusal comes as that first reply)."""
        try:
            if self.password is not None:
                auth = (self.username, self.password) if self.username else (self.password,)
                await self._connected_call("AUTH", *auth, protocol=protocol)
            if self.db:
                await self._connected_call("SELECT", self.db, protocol=protocol)
            if self.password is None and not self.db:
                await self._connected_call("PING", protocol=protocol)
        except ResponseError as exc:
            if str(exc).startswith(MAX_CLIENTS) or is_transient(str(exc)):
                raise RedisConnectionError(str(exc)) from None  # try again, with backoff
            raise
        except RedisConnectionError:
            # The server's error came before the handshake's command and it hung up (the
            # error carries its words): the same outcome as had it come as the reply.
            refused = protocol.refused
            if refused is not None and not (refused.startswith(MAX_CLIENTS)
                                            or is_transient(refused)):
                raise ResponseError(refused) from None  # DENIED (protected mode): final
            raise

    def _drop(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
        if protocol.transport is not None:
            protocol.transport.abort()

    def _not_redis(self, protocol: _Protocol, exc: Exception) -> None:
        """The peer's bytes are not Redis replies: nothing it said can be trusted, and
        trying again would get the same. Fail what waits, with a reason."""
        error = RedisConnectionError(
            f"{self.host}:{self.port} does not speak the Redis protocol ({exc})"
        )
        waiting = list(protocol.waiting)
        protocol.waiting.clear()
        for op in waiting:
            if not op.fut.done():
                op.fut.set_exception(error)
        self._drop(protocol)
        self._fail_queued(error)

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
                op.fut.set_exception(RedisConnectionError(op.refused) if op.refused else exc)
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
        if self._watchdog is not None:
            self._watchdog.cancel()
        # Stopped and waited for, not just cancelled: a connect cut off mid-handshake
        # hangs up its connection as it unwinds, before the loop may close.
        for task in [*self._tasks, self._connecting]:
            await stop_task(task)
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
        self._fail_queued(RedisConnectionError("closed"))

