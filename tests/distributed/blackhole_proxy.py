"""A TCP proxy in front of Redis that can black-hole: a network partition, played on loopback.

While :meth:`BlackholeProxy.cut` holds, the proxy accepts connections and
forwards nothing either way, answering nothing, as a link that drops every
packet without a reset. :meth:`heal` lets through what was held (TCP would have
retransmitted it) and connects the connections accepted meanwhile. It runs on a
loop of its own, in a thread, so a test's loop (or a benchmark's) stalling does
not stall the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from .redis_server import free_port

__all__ = ("BlackholeProxy",)


class BlackholeProxy:
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:target_port``, unless cut.

    Example::

        with BlackholeProxy(redis.port) as proxy:
            url = proxy.url   # give this to the clients
            proxy.cut()       # partitioned: accepted, never answered
            proxy.heal()
    """

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()  # set: forwarding; clear: black-holed
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="blackhole-proxy")
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> BlackholeProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def cut(self) -> None:
        """Partition: from now on nothing passes either way, and nobody is told."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        try:
            await self._open.wait()  # accepted in a partition: connected once it heals
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.target_port
                )
            except OSError:  # the server is down: the client sees its connection close
                return
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._links.discard(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await self._open.wait()  # cut: read nothing more (the kernel holds it)
                data = await source.read(65536)
                if not data:
                    break
                await self._open.wait()  # cut while reading: hold it until healed
                sink.write(data)
                await sink.drain()
        sink.close()

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            self._open.set()
            if self._server is not None:
                self._server.close()
            for task in list(self._links):
                task.cancel()
            await asyncio.gather(*self._links, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> BlackholeProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
