"""What the README and docs/*.md tests share: finding a page's fenced blocks, and running
a Python sample, a shell sample or checking a TOML sample the way a reader would.

A block may be marked by an HTML comment on the line right above its fence (invisible on
GitHub and on the site):

- ``<!-- test: skip (why) -->``: a deliberate fragment, or a command that starts servers
  which run until stopped; not run, and the reason is required.
- ``<!-- test: run -->``: a shell block (sh, bash, console) that the tests run in bash.
- ``<!-- test: file NAME -->``: a block written to ``NAME`` in the directory where the
  page's later ``run`` blocks execute (a ``podium.toml`` they use).

Python and TOML blocks run unless skipped; shell blocks run only where marked ``run``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = (
    "DOCS",
    "PAGES",
    "README",
    "ROOT",
    "Block",
    "assert_links_stay_inside",
    "blocks",
    "check_config_sample",
    "fenced",
    "run_python_sample",
    "run_shell_sample",
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

SHELL = ("sh", "bash", "console")
_MARK = re.compile(r"<!--\s*test:\s*(skip|run|file)\b\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with the mark above it (``""`` when none)."""

    path: Path
    line: int  # of the block's first line of code
    language: str
    code: str
    mark: str = ""  # "skip", "run" or "file"
    argument: str = ""  # the skip's reason, or the file's name

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the page, in order, with its mark. A mark that is malformed
    (a skip without its reason, a file without a name) is an error."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            language = lines[i].strip()[3:]
            start = i + 1
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            mark = _MARK.fullmatch(lines[start - 2].strip()) if start >= 2 else None
            kind, argument = (mark.group(1), mark.group(2)) if mark else ("", "")
            if kind == "skip" and not re.fullmatch(r"\(.+\)", argument):
                raise ValueError(f"{path.name}:{start + 1}: say why: <!-- test: skip (why) -->")
            if kind == "file" and not argument:
                raise ValueError(f"{path.name}:{start + 1}: <!-- test: file NAME --> names a file")
            code = "\n".join(lines[start:i]) + "\n"
            found.append(Block(path, start + 1, language, code, kind, argument))
        i += 1
    return found


def fenced(path: Path, language: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```LANGUAGE block ("": the plain ``` blocks)."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):  # every block is walked to its end, so that one's
            opened = lines[i].strip()[3:]  # closing fence is never taken for an opening
            start = i + 1
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            if opened == language:
                blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return blocks


def run_python_sample(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The sample on its own, in a fresh interpreter in ``cwd``: no top-level ``await``, no
    names from elsewhere, unclosed resources and dev-mode warnings shown on stderr."""
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_config_sample(code: str, tmp_path: Path) -> None:
    """A ```toml block loads as ``podium.toml`` (a bench scenario, or ``[[agents]]`` that
    use a model the page declares in another block, are left to their own tests)."""
    from podium.config import load_config

    data = tomllib.loads(code)
    if "load" in data or "script" in data:
        return  # a bench scenario, checked by the scenario tests
    if any(a.get("model") for a in data.get("agents", [])) and "models" not in data:
        return  # a fragment: the [[agents]] that use a model declared elsewhere on the page
    file = tmp_path / "podium.toml"
    file.write_text(code)
    load_config(file, environ={})


LINK = re.compile(r"\]\(([^)\s]+)\)")


def assert_links_stay_inside(path: Path) -> None:
    """Every link of the page is relative and names a file of the repository: the pages
    are read from a checkout, and the site is built from it."""
    for target in LINK.findall(path.read_text()):
        assert not target.startswith(("http://", "https://", "//")), (
            f"{path.name} links outside the repository: {target}"
        )
        if target.startswith(("#", "mailto:")):
            continue
        resolved = (path.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{path.name} links outside: {target}"
        assert resolved.exists(), f"{path.name} links to a missing file: {target}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM to what is left of the block's process group (its servers drain and exit),
    then SIGKILL to whatever outlives ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)  # raises once the group is empty
            time.sleep(0.05)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_shell_sample(
    block: Block, files: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """A ``run`` block in bash (``set -e``), in ``cwd`` with the page's ``file`` blocks
    written there, the ``podium`` of this interpreter first on the PATH. The sample's
    loopback ports 8000 and 8001 become free ones (in the files too), so samples run
    beside other tests; whatever the block left running (``podium sim-server &``) is
    stopped with its process group when it ends."""
    ports = {"8000": str(_free_port()), "8001": str(_free_port())}

    def mapped(text: str) -> str:
        return re.sub(r"\b(800[01])\b", lambda m: ports[m.group(1)], text)

    for name, code in files.items():
        (cwd / name).write_text(mapped(code))
    code = block.code
    if block.language == "console":  # the commands, without their prompts and outputs
        code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ "))
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}
    # Files, not pipes: a server the block left in the background holds its output open.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            ["bash", "-e", "-c", mapped(code)], cwd=cwd, env=env, text=True,
            stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,  # its own process group: the background jobs are in it
        )
        try:
            process.wait(timeout=60)
        finally:
            process.kill()  # a block past its time; no-op for one that ended
            process.wait()
            _stop_group(process.pid)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(process.args, process.returncode, out.read(), err.read())
