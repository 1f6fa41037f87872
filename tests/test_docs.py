"""docs/*.md, read the way a new user reads them, cannot rot silently.

- Every ```python block runs as written, in a fresh interpreter in an empty directory,
  and prints what its comments say it prints: the comment after a ``print(...)`` (or on
  the lines right below it) is the output, ``…`` standing for what varies (run ids).
  A block that prints must say what.
- Every ```toml block is a valid ``podium.toml``.
- Every ``podium ...`` command line in a shell block parses with the real parser.
- The names the pages use exist with that spelling: the HTTP endpoints, the metrics and
  the ``PODIUM_*`` variables. (configuration.md's options and keys, against the parsers
  and the config structs both ways, are tests/test_configuration_doc.py's.)

Not run: the shell blocks themselves (``pip install``, ``redis-server``, curl against a
running ``podium serve`` with its printed key); their endpoints are checked here by name,
their behaviour by the gateway tests (tests/gateway/test_threads_api.py,
test_token_stream.py, test_approvals_api.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from doc_samples import (
    DOCS,
    ROOT,
    assert_links_stay_inside,
    check_config_sample,
    fenced,
    run_python_sample,
)
from podium import config as cfg
from podium.cli.main import build_parser

SAMPLES = [(p, line, code) for p in DOCS for line, code in fenced(p, "python")]
CONFIGURATION = ROOT / "docs" / "configuration.md"


def test_there_are_pages_and_samples() -> None:
    names = {p.name for p in DOCS}
    assert {"approvals.md", "configuration.md", "threads.md"} <= names, names
    assert len(SAMPLES) >= 9


# --- Python blocks: they run, and print what they say -------------------------------

ELLIPSIS = re.compile(r"\s*(?:…|\.\.\.)\s*")


def output_claims(code: str) -> list[list[str]]:
    """Per commented ``print``, the fragments its output must contain, in order."""
    claims: list[list[str]] = []
    lines = code.splitlines()
    for i, line in enumerate(lines):
        if "print(" not in line:
            continue
        comments = [line.split("  # ", 1)[1]] if "  # " in line else []
        for below in lines[i + 1 :]:  # a long claim goes on the comment lines below
            if not below.strip().startswith("# "):
                break
            comments.append(below.strip()[2:])
        claims.extend([f for f in ELLIPSIS.split(text) if f] for text in comments)
    return claims


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "line", "code"), SAMPLES, ids=[f"{p.name}:{line}" for p, line, _ in SAMPLES]
)
def test_python_block_runs_and_prints_what_it_says(
    path: Path, line: int, code: str, tmp_path: Path
) -> None:
    out = run_python_sample(code, tmp_path)
    where = f"{path.name}:{line}"
    assert out.returncode == 0, f"{where}\n{out.stderr}"
    assert "Unclosed" not in out.stderr, out.stderr
    claims = output_claims(code)
    assert claims or not out.stdout.strip(), f"{where} prints without saying what:\n{out.stdout}"
    at = 0
    for fragments in claims:
        for fragment in fragments:
            found = out.stdout.find(fragment, at)
            assert found >= 0, f"{where}: {fragment!r} not in the output after {at}:\n{out.stdout}"
            at = found + len(fragment)


# --- TOML blocks, links, command lines ------------------------------------------------

CONFIGS = [(p, line, code) for p in DOCS for line, code in fenced(p, "toml")]


@pytest.mark.parametrize(
    ("path", "line", "code"), CONFIGS, ids=[f"{p.name}:{line}" for p, line, _ in CONFIGS]
)
def test_toml_block_is_valid_configuration(
    path: Path, line: int, code: str, tmp_path: Path
) -> None:
    check_config_sample(code, tmp_path)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_links_stay_inside_the_repository(path: Path) -> None:
    assert_links_stay_inside(path)


def command_lines() -> list[tuple[str, str]]:
    """(page:line, command) of each ``podium ...`` line of the pages' shell and plain blocks."""
    found: list[tuple[str, str]] = []
    for path in DOCS:
        for language in ("sh", "bash", ""):
            for line, code in fenced(path, language):
                for offset, text in enumerate(code.splitlines()):
                    if text.startswith("podium "):
                        found.append((f"{path.name}:{line + offset}", text))
    return found


COMMANDS = command_lines()


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_line_parses(where: str, command: str) -> None:
    argv = shlex.split(command, comments=True)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of refusing: the line has a mistake
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
