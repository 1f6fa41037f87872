"""Render a page in real headless Chromium over the DevTools protocol (aiohttp's websocket).

:func:`render` loads a URL, waits for its load event, evaluates an expression in the
page, takes a screenshot and returns the console errors and uncaught exceptions seen.
Skips the test when no Chromium is installed (``.ci/run`` installs Debian's).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--no-default-browser-check", "--mute-audio", "--hide-scrollbars",
    "--remote-debugging-port=0", "--window-size=1300,2400",
)
#: Where screenshots go: $PODIUM_ARTIFACTS when set, else a folder in the temp dir.
ARTIFACTS = Path(os.environ.get("PODIUM_ARTIFACTS")
                 or Path(tempfile.gettempdir()) / "podium-screenshots")


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium installed (apt-get install chromium)")


def _save(name: str, data: bytes) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(data)
    return path


@dataclass
class Page:
    """A page in a running browser: evaluate, screenshot, and what went wrong in it."""

    ws: aiohttp.ClientWebSocketResponse
    errors: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _waiting: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _events: dict[str, asyncio.Event] = field(default_factory=dict)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = future
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def event(self, name: str) -> asyncio.Event:
        return self._events.setdefault(name, asyncio.Event())

    async def pump(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                future = self._waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            method = data.get("method", "")
            params = data.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                            for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                self.errors.append(str(params["exceptionDetails"]))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                self.errors.append(params["entry"].get("text", ""))
            self.event(method).set()

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                                 awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(result["exceptionDetails"])
        return result["result"].get("value")

    async def screenshot(self, name: str) -> Path:
        """A full-page PNG under :data:`ARTIFACTS` (a test artifact, never committed)."""
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return await asyncio.to_thread(_save, f"{name}.png", base64.b64decode(shot["data"]))


@contextlib.asynccontextmanager
async def open_page(url: str) -> AsyncIterator[Page]:
    """Chromium on ``url``, loaded; closed afterwards."""
    profile = tempfile.mkdtemp(prefix="podium-chromium-")
    proc = await asyncio.create_subprocess_exec(
        chromium_binary(), *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        port = None
        while port is None:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            if not line:
                raise AssertionError("chromium exited before DevTools listened")
            found = re.search(rb"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                port = int(found[1])
        drain = asyncio.create_task(proc.stderr.read())  # keep the pipe from filling up
        async with aiohttp.ClientSession() as http:
            async with http.put(f"http://127.0.0.1:{port}/json/new?about:blank") as resp:
                target = await resp.json(content_type=None)
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                pump = asyncio.create_task(page.pump())
                try:
                    for domain in ("Runtime", "Log", "Page"):
                        await page.send(f"{domain}.enable")
                    loaded = page.event("Page.loadEventFired")
                    loaded.clear()
                    await page.send("Page.navigate", url=url)
                    await asyncio.wait_for(loaded.wait(), 60)
                    yield page
                finally:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
        drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drain
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


#: In-page check: per <svg>, its drawn size and how many marks (lines, bars, dots) it has.
SVG_STATS = """
Array.from(document.querySelectorAll('svg')).map(s => {
  const r = s.getBoundingClientRect();
  const marks = s.querySelectorAll('polyline, rect.bar, circle');
  let drawn = 0;
  marks.forEach(m => { const b = m.getBBox(); if (b.width > 0 || b.height > 0) drawn++; });
  return {title: s.getAttribute('aria-label'), width: r.width, height: r.height, marks: drawn};
})
"""
