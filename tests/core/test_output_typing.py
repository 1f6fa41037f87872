"""``Agent[OutT]``: an agent's output type reaches its runs' records and ``output_of`` under
mypy --strict (and pyright, where installed): a snippet checked by the real type checker,
so a regression of the overloads or the generics fails here, not in a user's editor."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from podium import Agent, FunctionModel

# assert_type is an error when the type differs; each `# error` line must be one.
SNIPPET = textwrap.dedent(
    """
    from __future__ import annotations

    import dataclasses
    from typing import Any, TypedDict, assert_type

    import msgspec

    from podium import Agent, Engine, FunctionModel, Handoff, RunRecord, remove_tool_calls


    class Verdict(msgspec.Struct):
        refund: bool


    @dataclasses.dataclass
    class Point:
        x: int


    class Movie(TypedDict):
        title: str


    model = FunctionModel.script(["ok"])
    text = Agent("text", model)
    assert_type(text, Agent[str])
    typed = Agent("typed", model, "Decide.", output_type=Verdict)
    assert_type(typed, Agent[Verdict])
    assert_type(Agent("listed", model, output_type=list[Verdict]), Agent[list[Verdict]])
    assert_type(Agent("point", model, output_type=Point), Agent[Point])
    assert_type(Agent("movie", model, output_type=Movie), Agent[Movie])
    assert_type(Agent("number", model, output_type=int), Agent[int])
    router = Agent("router", model, handoffs=[text, Handoff(typed, remove_tool_calls)])
    assert_type(router, Agent[str])

    record = typed.run_sync("Refund A-1?")
    assert_type(record, RunRecord[Verdict])
    assert_type(typed.output_of(record), Verdict)
    assert_type(text.output_of(text.run_sync("hi")), str)
    assert_type(record.output_as(Point), Point)  # the explicit form is unchanged
    assert_type(record.output, str | None)


    async def main() -> None:
        assert_type(await typed.run("Refund A-1?"), RunRecord[Verdict])
        async with Engine() as engine:
            assert_type(await engine.run(typed, "Refund A-1?"), RunRecord[Verdict])
            assert_type(await engine.resume(typed, "run-1"), RunRecord[Verdict])


    # A bare Agent / RunRecord still means any agent, as it did before Agent was generic.
    def any_agent(agent: Agent, run: RunRecord) -> Any:
        return agent.output_of(run)


    any_agent(typed, record)
    any_agent(text, text.run_sync("hi"))

    wrong: int = typed.output_of(record)  # error
    wrong_text: Verdict = text.output_of(text.run_sync("hi"))  # error
    """
)


def _expected_error_lines(source: str) -> set[int]:
    return {n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# error")}


@pytest.fixture
def snippet(tmp_path: Path) -> Path:
    path = tmp_path / "typed_agent.py"
    path.write_text(SNIPPET)
    return path


def test_mypy_strict_infers_the_output_type(snippet: Path, tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    out, err, _status = mypy_api.run([
        "--strict",
        "--no-error-summary",
        "--show-error-codes",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--python-version",
        f"{sys.version_info.major}.{sys.version_info.minor}",
        str(snippet),
    ])
    errors = [line for line in out.splitlines() if ": error:" in line]
    lines = {int(m.group(1)) for e in errors if (m := re.search(r":(\d+): error:", e))}
    assert lines == _expected_error_lines(SNIPPET), "\n".join(errors) + err
    # The two deliberate mistakes are type mismatches, not anything else.
    assert all("[assignment]" in e for e in errors), errors


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright is not installed")
def test_pyright_infers_the_output_type(snippet: Path) -> None:
    done = subprocess.run(
        ["pyright", "--outputjson", str(snippet)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = msgspec.json.decode(done.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    lines = {d["range"]["start"]["line"] + 1 for d in errors}
    assert lines == _expected_error_lines(SNIPPET), [
        (d["range"]["start"]["line"] + 1, d["message"]) for d in errors
    ]


def test_output_of_gives_the_typed_answer_at_run_time() -> None:
    class Verdict(msgspec.Struct):
        refund: bool

    model = FunctionModel.script(['{"refund": true}'])
    typed = Agent("typed", model, output_type=Verdict)
    assert typed.output_of(typed.run_sync("Refund A-1?")) == Verdict(refund=True)
    text = Agent("text", FunctionModel.script(["It shipped."]))
    assert text.output_of(text.run_sync("Where is A-1?")) == "It shipped."
