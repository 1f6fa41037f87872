"""docs/*.md, read the way a new user reads them, cannot rot silently.

- Every code sample runs (Python, TOML, marked shell blocks): tests/test_doc_samples.py.
- Every ``podium ...`` command line in a shell block parses with the real parser.
- The names the pages use exist with that spelling: the HTTP endpoints, the metrics and
  the ``PODIUM_*`` variables. (configuration.md's options and keys, against the parsers
  and the config structs both ways, are tests/test_configuration_doc.py's.)

Not run: the shell blocks not marked ``<!-- test: run -->`` (``pip install``,
``redis-server``, curl against a running ``podium serve`` with its printed key); their
endpoints are checked here by name, their behaviour by the gateway tests
(tests/gateway/test_threads_api.py, test_token_stream.py, test_approvals_api.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from doc_samples import (
    DOCS,
    PAGES,
    ROOT,
    SHELL,
    assert_links_stay_inside,
    blocks,
)
from podium import config as cfg
from podium.cli.main import build_parser

CONFIGURATION = ROOT / "docs" / "configuration.md"


def test_there_are_pages() -> None:
    names = {p.name for p in DOCS}
    assert {"approvals.md", "configuration.md", "threads.md", "benchmarks.md"} <= names, names


# --- links, command lines ------------------------------------------------------------


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_links_stay_inside_the_repository(path: Path) -> None:
    assert_links_stay_inside(path)


def command_lines() -> list[tuple[str, str]]:
    """(page:line, command) of each ``podium ...`` line of the pages' shell and plain blocks
    (the README's too), a line that ends in ``\\`` joined with the next."""
    found: list[tuple[str, str]] = []
    for path in PAGES:
        for block in blocks(path):
            if block.language not in (*SHELL, ""):
                continue
            lines = block.code.splitlines()
            if block.language == "console":
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            joined: list[tuple[int, str]] = []
            for offset, text in enumerate(lines):
                if joined and joined[-1][1].endswith("\\"):
                    joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + text.strip())
                else:
                    joined.append((offset, text))
            found += [
                (f"{path.name}:{block.line + offset}", text)
                for offset, text in joined
                if text.startswith("podium ")
            ]
    return found


COMMANDS = command_lines()


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_line_parses(where: str, command: str) -> None:
    words = shlex.split(command, comments=True)[1:]
    # "…" is an option's value left out (kept), or the rest of a command (dropped)
    argv = [w for i, w in enumerate(words) if w != "…" or words[i - 1].startswith("-")]
    if "&" in argv:  # started in the background: the command is what comes before
        argv = argv[: argv.index("&")]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of refusing: the line has a mistake
        if exc.code != 0:  # (`--version` and `--help` exit 0 after printing)
            pytest.fail(f"{where}: `{command}` does not parse (exit {exc.code})")


# --- names: options, configuration keys, endpoints, metrics, variables ---------------


def routes() -> list[tuple[re.Pattern[str], set[str]]]:
    """The gateway's paths (as patterns) and methods, read from its route tables."""
    found = [(r"/mcp", {"POST"})]
    for module in (ROOT / "src" / "podium" / "gateway").glob("*.py"):
        for path, methods in re.findall(
            r'Route\(\s*"([^"]+)"[^)]*?methods=\[([^\]]*)\]', module.read_text()
        ):
            found.append((path, set(re.findall(r'"([A-Z]+)"', methods))))
    # The API's own routes are built from one typed table (gateway/routes.py).
    from podium.gateway.routes import OPERATIONS

    found += [(op.path, {op.method}) for op in OPERATIONS]
    # A worker's metrics port answers its probes too (/livez, /readyz).
    probes = (ROOT / "src" / "podium" / "observe" / "serve_metrics.py").read_text()
    found += [(path, {"GET"}) for path in re.findall(r'"(/\w+)": probes\.', probes)]
    return [(re.compile(re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"), m) for p, m in found]


def test_documented_endpoints_exist() -> None:
    table = routes()
    text = "\n".join(p.read_text() for p in DOCS)
    said = re.findall(r"\b(GET|POST|DELETE)\s+`?(/[^\s`?#]*)", text)
    named = re.findall(r"`(/(?:v1/|readyz|metrics|mcp|dashboard)[^\s`?#]*)", text)
    said += [("", path) for path in named]
    assert len(said) > 20
    for method, path in said:
        matches = [m for pattern, m in table if pattern.match(path)]
        assert matches, f"no endpoint {path}"
        assert not method or any(method in m for m in matches), f"no {method} {path}"


def source_text() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "src" / "podium").rglob("*.py"))


def test_documented_metrics_exist() -> None:
    source = source_text()
    names = set(re.findall(r"\b(podium_[a-z0-9_]+)", "\n".join(p.read_text() for p in DOCS)))
    assert names
    for name in names:  # counters are declared without the _total the exposition adds
        assert f'"{name.removesuffix("_total")}"' in source, f"no metric {name}"


def test_documented_variables_exist_and_examples_load() -> None:
    text = "\n".join(p.read_text() for p in DOCS)
    source = source_text()
    for name in set(re.findall(r"\b(PODIUM_[A-Z0-9_]+)", text)):
        if "__" not in name:  # PODIUM_SECTION__FIELD is the generic form, loaded below
            assert name in source, f"no variable {name}"
    examples = {  # the reader puts a real digest where the page says <hex>
        name: value.replace("<hex>", "0" * 64)
        for name, value in re.findall(r'`(PODIUM_[A-Z0-9_]+)="?([^`"]+)"?`', text)
    }
    assert "PODIUM_SERVER__PORT" in examples, examples
    loaded = cfg.load_config(None, environ=examples)
    assert loaded.server.port == int(examples["PODIUM_SERVER__PORT"])
