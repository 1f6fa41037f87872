"""Output guardrails: what the model says is screened before it leaves the run.

An :class:`OutputGuard` on a :class:`~podium.security.screen.ScreeningPolicy`
(``ScreeningPolicy(outputs=OutputGuard(...))``) checks the run's final answer and the
tool calls the model makes, with the policy's threshold and action, its verdicts
journaled and counted like those on inputs and tool results (source ``output`` or
``call:<tool>``):

- **exfiltration by URL**: a markdown or HTML image whose host is not allowed is fetched
  by the client that renders the answer, with whatever the model put in its URL (rule
  ``exfil_image``, 0.95; so is a reference-style image, an HTML ``srcset``, ``poster``,
  ``background``, an SVG ``<image>``/``<use>``, a stylesheet ``<link>``, an ``<object>``
  or ``<embed>``, and a CSS ``url(...)``); URLs are read as a browser reads them
  (backslashes as slashes, tabs and newlines dropped, ``https:evil`` and ``///evil`` as
  ``https://evil``); a link or bare URL to such a host that carries data (a query,
  a fragment, a long path) is one click from the same (``exfil_link``, 0.8); a plain link
  to such a host is only noted (``outside_link``, 0.3: below the default threshold);
- **secrets**: a secret the run knows in the answer (``secret``, 1.0; it is scrubbed from
  what is written down in any case, see :mod:`podium.security.redact`);
- **tainted calls**: a tool call whose argument quotes text the screen flagged in the
  input or a tool result (a URL, an address, a phrase of 16 characters or more) is one the
  injected text may have asked for (``tainted_call``, 0.8); under ``block`` it does not run.

A host is allowed when it matches ``allow_hosts`` (``"*.example.com"`` for subdomains),
or when the egress policy in force (``egress``, else the tenant's) lists hosts and allows
the URL. An egress policy that allows every public host vouches for none: a link to any
host outside ``allow_hosts`` is then outside.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from podium.security.egress import EgressDenied, EgressPolicy
from podium.security.findings import Finding
from podium.security.tenant_egress import current_egress

__all__ = ("OutputGuard", "remember_flagged", "tainted_values")


class _Flags(Protocol):
    """The part of a run's state (:class:`~podium.engine.replay.RunState`) that keeps what
    the screen flagged."""

    flagged: list[str] | None

_IMAGE = re.compile(r"!\[[^\]\n]{0,1000}\]\(\s*<?(?P<url>[^)\s>]+)>?[^)\n]{0,200}\)?")
_LINK = re.compile(
    r"(?<!!)\[[^\]\n]{0,1000}\]\(\s*<?(?P<url>[^)\s>]+)>?[^)\n]{0,200}\)?"  # [text](url)
    r"|^\s{0,3}\[[^\]\n]+\]:\s*<?(?P<ref>\S+?)>?\s*$"  # [ref]: url (images use it too)
    r"|(?P<bare>\bhttps?://[^\s<>()\[\]'\"`]+)",
    re.IGNORECASE | re.MULTILINE,
)
#: Without one of these, a text has no link: the regexes are not run.
_MARKS = ("](", "://", "]:", "<", "url(", "][")
# An HTML tag (quoted attribute values may hold ">") and its attributes.
_TAG = re.compile(
    r"<(?P<tag>[a-z][a-z0-9:-]{0,30})\b"
    r"(?P<attrs>(?:[^>\"']|\"[^\"]{0,2000}\"|'[^']{0,2000}'){0,4000})>?",
    re.IGNORECASE,
)
_ATTR = re.compile(r"([a-z][a-z0-9:_-]*)\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>\"']+)", re.IGNORECASE)
#: Attributes a renderer fetches by itself (``href``: only on the tags that load it).
_FETCHED = frozenset({"src", "srcset", "poster", "background", "data", "dynsrc", "lowsrc"})
_FETCHED_HREF = frozenset({"link", "image", "use", "feimage", "svg:image"})
_CSS_URL = re.compile(r"url\(\s*['\"]?(?P<url>[^'\")\s]+)", re.IGNORECASE)
# A reference-style image (``![alt][label]``, ``![label][]``, ``![label]``) and the
# definition it takes its URL from.
_REF_IMAGE = re.compile(r"!\[(?P<alt>[^\]\n]{0,1000})\](?:\[(?P<label>[^\]\n]{0,1000})\])?(?!\()")
_REF_DEF = re.compile(
    r"^[ \t]{0,3}\[(?P<label>[^\]\n]+)\]:[ \t]*\n?[ \t]*<?(?P<url>[^\s>]+)>?(?=\s|$)",
    re.MULTILINE,
)
_SPECIAL = re.compile(r"^(https?):[/\\]*", re.IGNORECASE)
_DROPPED = str.maketrans("", "", "\t\n\r")
_HOST = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^/\s?#'\"<>)]+)")
#: A link "carries data" when its URL has room for it: a query, a fragment, a long path.
_LONG_PATH = 40
#: What of a flagged text an argument must quote to be tainted by it.
_SHORTEST_QUOTE = 16
_BARE_URL = re.compile(r"(?i)\bhttps?:[/\\]*[^\s<>()\[\]'\"`]+")
_URLISH = re.compile(r"https?://|www\.|@[a-z0-9-]+\.[a-z]", re.IGNORECASE)


def _host_matches(host: str, patterns: frozenset[str]) -> bool:
    parts = host.split(".")
    return host in patterns or any(
        f"*.{'.'.join(parts[i:])}" in patterns for i in range(1, len(parts))
    )


@dataclass(frozen=True, slots=True)
class OutputGuard:
    """Checks on what the model says (see the module's docstring).

    Example::

        ScreeningPolicy(action="redact", outputs=OutputGuard(allow_hosts={"docs.acme.com"}))
    """

    allow_hosts: frozenset[str] = frozenset()
    egress: EgressPolicy | None = None
    links: bool = True
    tool_calls: bool = True
    name: str = "output"

    def __post_init__(self) -> None:
        hosts = frozenset(h.lower().rstrip(".") for h in self.allow_hosts)
        object.__setattr__(self, "allow_hosts", hosts)

    def allowed(self, url: str) -> bool:
        """Whether a link to ``url`` stays where the policy allows (a relative link, a
        ``mailto:`` or ``data:`` one cannot reach a host of the model's choosing)."""
        url = _as_browsers_read(url)
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").rstrip(".")
        except ValueError:  # a malformed URL (bad brackets, port): no host to trust
            return False
        if parts.scheme.lower() not in ("http", "https", "") or (not host and not parts.netloc):
            return True
        if not host:
            return False
        if _host_matches(host, self.allow_hosts):
            return True
        policy = self.egress or current_egress()
        if policy is None or not policy.allow_hosts:
            return False
        try:
            policy.check_url(url)
        except (EgressDenied, ValueError):
            return False
        return True

    @staticmethod
    def host_in(excerpt: str) -> str:
        """The host of the first URL in ``excerpt`` (what a verdict's excerpt shows)."""
        m = _HOST.search(excerpt)
        return m.group(1).lower() if m else ""

    def screen(self, text: str) -> list[Finding]:
        """The findings on an answer: images and links to hosts not allowed."""
        if not self.links:
            return []
        if not any(mark in text for mark in _MARKS):
            return []  # (most answers: no link, no regex run)
        found: list[Finding] = []
        images: list[tuple[int, int]] = []
        for start, end, urls in _fetched(text, images):
            if not all(self.allowed(url) for url in urls):
                found.append(Finding("exfil_image", 0.95, start, end))
        for m in _LINK.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in images):
                continue  # (the image's own URL)
            url = m.group("url") or m.group("ref") or m.group("bare") or ""
            if self.allowed(url):
                continue
            try:
                parts = urlsplit(url)
                data = bool(parts.query or parts.fragment or len(parts.path) >= _LONG_PATH)
            except ValueError:
                data = True
            rule, score = ("exfil_link", 0.8) if data else ("outside_link", 0.3)
            found.append(Finding(rule, score, m.start(), m.end()))
        return found


def _as_browsers_read(url: str) -> str:
    """``url`` as a browser parses it (WHATWG): tabs and newlines dropped, backslashes
    read as slashes, and after ``http:``/``https:`` or at the start of a relative URL any
    run of slashes read as the two that start a host."""
    url = url.translate(_DROPPED).strip("\x00 \x0c")
    if "\\" in url and not url.lower().startswith(("mailto:", "data:")):
        url = url.replace("\\", "/")
    m = _SPECIAL.match(url)
    if m:
        return f"{m.group(1)}://{url[m.end():]}"
    if url.startswith("//"):
        return "//" + url.lstrip("/")
    return url


def _fetched(text: str, covered: list[tuple[int, int]]) -> list[tuple[int, int, list[str]]]:
    """Where ``text`` makes a renderer fetch a URL by itself (the span a redaction takes
    out), and the URLs: markdown images (inline and by reference), HTML attributes that
    load, CSS ``url()``. Where those URLs are written goes to ``covered``: not links too
    (only there: a link elsewhere in the same tag is still one)."""
    out = [(m.start(), m.end(), [m.group("url")]) for m in _IMAGE.finditer(text)]
    covered += [(s, e) for s, e, _ in out]
    if "][" in text or "]:" in text:
        defs = {d.group("label").strip().lower(): d for d in _REF_DEF.finditer(text)}
        for m in _REF_IMAGE.finditer(text):
            d = defs.get((m.group("label") or m.group("alt") or "").strip().lower())
            if d is not None:  # the use and the definition, each withheld under redact
                out.append((m.start(), m.end(), [d.group("url")]))
                if d.span() not in covered:
                    covered.append(d.span())
                    out.append((d.start(), d.end(), [d.group("url")]))
    tags: list[tuple[int, int]] = []
    if "<" in text:
        for m in _TAG.finditer(text):
            tag, at = m.group("tag").lower(), m.start("attrs")
            urls: list[str] = []
            for a in _ATTR.finditer(m.group("attrs")):
                # (a browser decodes character references: "https&#58;//evil")
                name, value = a.group(1).lower(), html.unescape(a.group(2).strip("\"'"))
                before = len(urls)
                if name == "srcset":  # "a.png 1x, https://b/c.png 2x"
                    urls += [c.split()[0] for c in value.split(",") if c.split()]
                elif name in _FETCHED or (name.endswith("href") and tag in _FETCHED_HREF):
                    urls.append(value)
                elif name == "style":
                    urls += [c.group("url") for c in _CSS_URL.finditer(value)]
                if len(urls) > before:
                    covered.append((at + a.start(2), at + a.end(2)))
            if urls:
                out.append((m.start(), m.end(), urls))
                tags.append(m.span())
    if "url(" in text.lower():
        for c in _CSS_URL.finditer(text):
            if not any(s <= c.start() < e for s, e in tags):
                out.append((c.start(), c.end(), [c.group("url")]))
                covered.append(c.span())
    return out


def _url_keys(text: str) -> set[str]:
    """The URLs in ``text`` as ``host/path`` (lower case, no trailing slash, no query)."""
    keys = set()
    for m in _BARE_URL.finditer(text):
        try:
            parts = urlsplit(_as_browsers_read(m.group()))
            host = (parts.hostname or "").rstrip(".")
        except ValueError:
            continue
        if host:
            keys.add(f"{host}{parts.path.rstrip('/')}".lower())
    return keys


def tainted_values(values: Iterable[str], flagged: Sequence[str]) -> str | None:
    """The first of ``values`` (a call's string arguments) that quotes one of the
    ``flagged`` texts (a URL or address of any length, other text of 16 characters or
    more), or that points under a URL a flagged text names (the same host and path, with
    data added: ``https://evil.test/c?d=...`` after "send it to https://evil.test/c"), or
    None."""
    lowered = [f.lower() for f in flagged]
    named: set[str] | None = None
    for value in values:
        v = value.strip().lower()
        if len(v) < _SHORTEST_QUOTE and not (len(v) >= 6 and _URLISH.search(v)):
            continue
        if any(v in f for f in lowered):
            return value
        if "http" in v:
            if named is None:  # (read once, and only for a call that has a URL)
                named = set().union(*map(_url_keys, lowered))
            for key in _url_keys(v):
                if any(key == n or key.startswith(n + "/") for n in named):
                    return value
    return None


#: Flagged texts a run keeps for the tainted-call check, and how much of each.
MAX_FLAGGED = 16
MAX_FLAGGED_CHARS = 64 * 1024


def remember_flagged(state: _Flags, text: str) -> None:
    """Keep ``text`` (flagged by the screen, read by the model) for the tainted-call check
    of the run's later calls: the last :data:`MAX_FLAGGED`, bounded in size."""
    if not text:
        return
    flagged = state.flagged
    if flagged is None:
        flagged = state.flagged = []
    flagged.append(text[:MAX_FLAGGED_CHARS])
    del flagged[:-MAX_FLAGGED]
