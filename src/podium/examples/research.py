"""A research agent: fetches pages from a local web server and summarizes them.

    podium run research "Summarize the Podium field notes"
    PODIUM_FETCH_LOOPBACK_PORTS=8000 podium run research "Summarize http://127.0.0.1:8000/x.html"

``fetch`` is a real HTTP tool on Podium's pooled client behind an egress policy
(:mod:`podium.security.egress`): a timeout, a size cap, and only the hosts it was
allowed to reach. Loopback is refused except on the ports opened for it
(``loopback_ports``: the sample pages' server's port, which :func:`agent` opens;
``PODIUM_FETCH_LOOPBACK_PORTS=8000,8001`` for ``podium run``), so a page cannot send
``fetch`` to another service on this machine (a Redis, a database, an admin port);
pass ``allowed_hosts`` to :func:`build_agent` (or set
``PODIUM_FETCH_ALLOW_HOSTS=host1,host2``) to allow more hosts, on ports 80 and 443.
Every redirect and every resolved address is checked again, so a page cannot
redirect ``fetch`` to a private address or a loopback port not opened.

:func:`serve_pages` starts a tiny ``http.server`` on a free loopback port in a
background thread, serving the sample pages in ``examples/pages/``. The
model is the simulated one with a policy function: it fetches the URLs in
the input (or the server's index page), follows the links it finds on the
same host, and answers with an extractive summary (the first sentences of
each page).
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from podium import Agent, LatencyModel, ModelRequest, SimStep, SimToolCall, SimulatedModel, tool
from podium.security.egress import EgressDenied, EgressPolicy
from podium.tools.http import shared_client

__all__ = (
    "PAGES",
    "PageServer",
    "agent",
    "build_agent",
    "egress_policy",
    "is_allowed",
    "serve_pages",
)

PAGES = Path(__file__).with_name("pages")
MAX_PAGES = 6
MAX_BYTES = 256 * 1024


# -- the local web server -----------------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class PageServer:
    """A loopback HTTP server for a directory, on a background thread. Use ``with``."""

    def __init__(self, directory: Path = PAGES, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="podium-pages", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def serve_pages(directory: Path = PAGES, port: int = 0) -> PageServer:
    """Serve ``directory`` on ``http://127.0.0.1:PORT`` (a free port by default)."""
    return PageServer(directory, port=port)


# -- the fetch tool -----------------------------------------------------------------------------


#: Loopback services a page must never make ``fetch`` talk to (Redis, PostgreSQL, NATS...).
SERVICE_PORTS = frozenset({2379, 4222, 5432, 6379, 6380, 9200, 11211, 27017})


def egress_policy(
    allowed_hosts: Iterable[str] = (),
    timeout_s: float = 5.0,
    loopback_ports: Iterable[int] = (),
) -> EgressPolicy:
    """``allowed_hosts`` on ports 80 and 443, and loopback only on ``loopback_ports``.

    No loopback port is open unless listed (the sample pages' server opens its own);
    the well-known service ports are never opened. Private, link-local and metadata
    addresses stay refused, on every redirect and on the address a name resolves to.
    """
    ports = frozenset(loopback_ports) - SERVICE_PORTS
    hosts = frozenset(allowed_hosts)
    if not ports:  # no loopback at all: the public hosts listed, nothing else
        return EgressPolicy(
            allow_hosts=hosts or frozenset({"invalid."}),  # (empty would mean every host)
            max_response_bytes=MAX_BYTES,
            timeout_s=timeout_s,
        )
    # (Loopback is open on the ports listed only, never on 80/443, where a machine's own
    # admin pages may listen; the listed public hosts on 80/443 and those; SERVICE_PORTS
    # never.)
    return EgressPolicy.loopback(
        hosts=hosts,
        allow_ports=frozenset({80, 443}) | ports,
        deny_ports=SERVICE_PORTS,
        private_ports=ports,
        max_response_bytes=MAX_BYTES,
        timeout_s=timeout_s,
    )


def is_allowed(
    url: str, allowed_hosts: Iterable[str] = (), loopback_ports: Iterable[int] = ()
) -> bool:
    """Whether ``fetch`` may start at ``url`` (each redirect and resolved address is checked
    again when it is fetched)."""
    try:
        egress_policy(allowed_hosts, loopback_ports=loopback_ports).check_url(url)
    except (EgressDenied, ValueError):
        return False
    return True


class _PageText(HTMLParser):
    """Title, visible text and links of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.links: list[str] = []
        self._chunks: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in.append(tag)
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)

    def handle_endtag(self, tag: str) -> None:
        while tag in self._in and self._in.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if "title" in self._in:
            self.title += data.strip()
        elif data.strip() not in ("", self.title) and not {"script", "style"} & set(self._in):
            self._chunks.append(data.strip())  # (a heading repeating the title is skipped)

    @property
    def text(self) -> str:
        return " ".join(self._chunks)


def make_fetch(
    allowed_hosts: Iterable[str] = (), timeout_s: float = 5.0, loopback_ports: Iterable[int] = ()
) -> Any:
    client = shared_client(egress_policy(allowed_hosts, timeout_s, loopback_ports))

    @tool(timeout=timeout_s + 1.0, retries=1, max_result_tokens=1500)
    async def fetch(url: str) -> dict[str, Any]:
        """Fetch a web page and return its title, text and links.

        Args:
            url: The page's http(s) URL.
        """
        try:
            response = await client.get(url)
        except EgressDenied as exc:
            raise EgressDenied(f"refusing to fetch {url!r}: {exc}") from None
        if response.status >= 400:
            raise LookupError(f"{url} answered HTTP {response.status} {response.reason}")
        text = response.text
        url = response.url  # where the redirects ended
        if response.content_type != "text/html":
            return {"url": url, "title": "", "text": text.strip(), "links": []}
        page = _PageText()
        page.feed(text)
        links = [urllib.parse.urljoin(url, href) for href in page.links]
        return {"url": url, "title": page.title, "text": page.text, "links": links}

    return fetch


# -- the simulated model's policy ---------------------------------------------------------------

_URL = re.compile(r"https?://[^\s\"'<>)]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _first_sentences(text: str, n: int = 2) -> str:
    return " ".join(_SENTENCE.split(text.strip())[:n])


def make_policy(start_url: str | None) -> Any:
    def decide(request: ModelRequest) -> SimStep | str:
        messages = request.messages
        question = messages[1].content
        pages: dict[str, dict[str, Any]] = {}
        failed: dict[str, str] = {}
        asked: set[str] = set()
        calls: dict[str, str] = {}
        for m in messages:
            for c in m.tool_calls:
                url = json.loads(c.arguments or "{}").get("url", "")
                calls[c.id] = url
                asked.add(url)
            if m.role == "tool" and m.tool_call_id in calls:
                try:
                    pages[calls[m.tool_call_id]] = json.loads(m.content)
                except ValueError:
                    failed[calls[m.tool_call_id]] = m.content
        wanted = [u.rstrip(".,;") for u in _URL.findall(question)]
        if not wanted and start_url:
            wanted = [start_url]
        # Follow links found on pages already fetched, on the same host as what was asked.
        hosts = {urllib.parse.urlsplit(u).netloc for u in wanted}
        for page in pages.values():
            wanted.extend(
                link
                for link in page.get("links", ())
                if urllib.parse.urlsplit(link).netloc in hosts
            )
        todo = list(dict.fromkeys(u for u in wanted if u not in asked))
        room = MAX_PAGES - len(asked)
        if todo and room > 0:
            return SimStep(
                content=f"Fetching {len(todo[:room])} page(s).",
                tool_calls=tuple(SimToolCall("fetch", {"url": u}) for u in todo[:room]),
            )
        if not pages:
            reasons = "; ".join(failed.values()) or "no URL to start from"
            return f"I could not read any page: {reasons}"
        lines = [f"Summary of {len(pages)} page(s):"]
        for url, page in pages.items():
            lines.append(f"- {page.get('title') or url} ({url}): {_first_sentences(page['text'])}")
        lines.extend(f"- {url}: not fetched ({why})" for url, why in failed.items())
        return "\n".join(lines)

    return decide


def build_agent(
    start_url: str | None = None,
    *,
    allowed_hosts: Iterable[str] | None = None,
    loopback_ports: Iterable[int] | None = None,
) -> Agent:
    """The research agent; ``start_url`` is fetched when the input names no URL.
    ``loopback_ports`` (default ``$PODIUM_FETCH_LOOPBACK_PORTS``) are the loopback ports
    ``fetch`` may reach: none unless listed."""
    if allowed_hosts is None:
        env = os.environ.get("PODIUM_FETCH_ALLOW_HOSTS", "")
        allowed_hosts = [h.strip() for h in env.split(",") if h.strip()]
    if loopback_ports is None:
        env = os.environ.get("PODIUM_FETCH_LOOPBACK_PORTS", "")
        loopback_ports = [int(p) for p in env.split(",") if p.strip().isdigit()]
    return Agent(
        "research",
        SimulatedModel(make_policy(start_url), latency=LatencyModel(ttft_s=0.01), seed=0),
        "You research questions by fetching web pages and summarizing what they say.",
        [make_fetch(allowed_hosts, loopback_ports=loopback_ports)],
        max_steps=MAX_PAGES + 2,
    )


_server: PageServer | None = None


def agent() -> Agent:
    """The research agent over the sample pages, served on a free loopback port.

    The server is started on the first call and lives as long as the process.
    """
    global _server
    if _server is None:
        _server = serve_pages()
    return build_agent(f"{_server.url}/index.html", loopback_ports=[_server.port])
