"""The sandbox's probe tells "not installed" from "slow" (issue 29): a probe that times out
or fails once is tried again before the sandbox is called unavailable, and a timeout is
never kept. A shell script stands in for bubblewrap: each run counted in a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from podium.security import sandbox
from podium.security.sandbox import Sandbox


@pytest.fixture(autouse=True)
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_PROBE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(sandbox, "_PROBE_PAUSE_S", 0.0)


def fake_bwrap(tmp_path: Path, first: str, then: str) -> tuple[str, Path]:
    """A ``bwrap`` whose first run does ``first`` and every later one ``then``."""
    runs = tmp_path / "runs"
    script = tmp_path / "bwrap"
    script.write_text(
        "#!/bin/sh\n"
        f'echo run >> "{runs}"\n'
        f'if [ "$(wc -l < "{runs}")" -eq 1 ]; then {first}; else {then}; fi\n'
    )
    script.chmod(0o755)
    return str(script), runs


def _runs(runs: Path) -> int:
    return len(runs.read_text().splitlines())


def test_a_probe_that_times_out_once_is_tried_again(tmp_path: Path) -> None:
    bwrap, runs = fake_bwrap(tmp_path, "exec sleep 5", "exit 0")
    box = Sandbox(bwrap=bwrap)
    assert box.available(), box.unavailable_reason
    assert _runs(runs) == 2 and box.unavailable_reason == ""


def test_a_probe_that_fails_once_is_tried_again(tmp_path: Path) -> None:
    bwrap, runs = fake_bwrap(tmp_path, "echo 'No space left on device' >&2; exit 1", "exit 0")
    assert Sandbox(bwrap=bwrap).available()
    assert _runs(runs) == 2


def test_a_sandbox_that_always_fails_says_why_and_keeps_the_answer(tmp_path: Path) -> None:
    bwrap, runs = fake_bwrap(tmp_path, "exit 1", "echo 'setting up uid map: denied' >&2; exit 1")
    box = Sandbox(bwrap=bwrap)
    assert not box.available()
    assert box.unavailable_reason == (
        "bubblewrap cannot create namespaces here: setting up uid map: denied"
    )
    assert _runs(runs) == sandbox._PROBES
    assert not box.available() and _runs(runs) == sandbox._PROBES  # kept: not probed again


def test_a_probe_that_always_times_out_is_not_kept(tmp_path: Path) -> None:
    bwrap, runs = fake_bwrap(tmp_path, "exec sleep 5", "exec sleep 5")
    box = Sandbox(bwrap=bwrap)
    assert not box.available()
    assert "did not answer within 0.5s" in box.unavailable_reason
    assert _runs(runs) == sandbox._PROBES
    assert not box.available() and _runs(runs) == 2 * sandbox._PROBES  # asked again


def test_no_bwrap_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    box = Sandbox()
    assert not box.available()
    assert box.unavailable_reason == "bubblewrap (bwrap) is not installed"
