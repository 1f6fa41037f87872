"""mkdocs hook: links from a page to repository files outside ``docs/``.

The pages are written to be read on GitHub too, where ``[the Dockerfile](../deploy/Dockerfile)``
opens the file. The site holds only ``docs/``, so there such a link would be broken (and
``--strict`` refuses it): it is turned into the file's repository path, in code, after
checking that the file exists. A link to a missing file is a warning, which ``--strict``
makes an error.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repo_links")

# [text](target) where target is relative and climbs out of docs/ (../...)
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]*)(#[^)\s]*)?\)")
FENCE = re.compile(r"^(```|~~~)", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    here = (docs / page.file.src_path).parent

    def plain(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        resolved = (here / target).resolve()
        if resolved.is_relative_to(docs):  # a page of the site after all: mkdocs checks it
            return match.group(0)
        if not resolved.is_relative_to(repo) or not resolved.exists():
            log.warning("%s links to %s, which is not a file of the repository",
                        page.file.src_path, target)
            return match.group(0)
        path = resolved.relative_to(repo).as_posix() + ("/" if resolved.is_dir() else "")
        if text.strip("`") == path.rstrip("/") or text.strip("`") == path:
            return f"`{path}`"
        return f"{text} (`{path}`)"

    # Only outside code blocks: a fence's contents are code, not links.
    parts = FENCE.split(markdown)
    out: list[str] = []
    inside = False
    for part in parts:
        if part in ("```", "~~~"):
            inside = not inside
            out.append(part)
        else:
            out.append(part if inside else LINK.sub(plain, part))
    return "".join(out)
