"""A real aiohttp server on loopback for the egress tests: pages, redirects, big bodies, the
headers it was sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


def _app() -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html><title>ok</title>hello</html>", content_type="text/html")

    async def data(request: web.Request) -> web.Response:
        return web.json_response({"city": request.match_info["city"], **request.query})

    async def charset(request: web.Request) -> web.Response:
        content_type = f"text/plain; charset={request.query['cs']}"
        return web.Response(body="héllo".encode(), headers={"Content-Type": content_type})

    async def headers(request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def big(request: web.Request) -> web.StreamResponse:
        n = int(request.query.get("n", "100000"))
        if request.query.get("chunked"):  # no Content-Length: the cap must count bytes read
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for _ in range(n // 1000):
                await resp.write(b"x" * 1000)
            await resp.write_eof()
            return resp
        return web.Response(body=b"x" * n)

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/data/{city}", data)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/headers", headers)
    app.router.add_get("/charset", charset)
    app.router.add_get("/big", big)
    return app


@asynccontextmanager
async def serve(host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve the test app on a free port; yields its base URL."""
    runner = web.AppRunner(_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    server = site._server
    assert server is not None and server.sockets
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    finally:
        await runner.cleanup()
