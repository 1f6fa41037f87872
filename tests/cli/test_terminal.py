"""``podium run`` at a terminal: the approval prompt answers to Ctrl-C and Ctrl-D.

A real ``podium run`` runs on a pseudo-terminal (its controlling terminal, so the
keys go through the line discipline as a user's do: Ctrl-C is a SIGINT from the
terminal, Ctrl-D the end of input)."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.test_mistakes import env, podium_cmd

pytestmark = pytest.mark.slow

PROMPT = b"needs approval: [a]pprove, [r]eject, [e]dit arguments? "
REFUND = ("run", "refunds", "Refund 250 on A-1001")


class Terminal:
    """A ``podium`` command whose terminal is the slave side of a pty we hold."""

    def __init__(self, args: tuple[str, ...], cwd: Path) -> None:
        master, slave = os.openpty()

        def take_the_terminal() -> None:  # in the child, a new session's leader by now
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            podium_cmd(*args), cwd=cwd, env=env(), stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True, preexec_fn=take_the_terminal,
        )
        os.close(slave)
        self.master = master
        self.seen = b""

    def expect(self, text: bytes, timeout: float = 60) -> None:
        """Read until ``text`` has been printed."""
        end = time.monotonic() + timeout
        while text not in self.seen:
            left = end - time.monotonic()
            if left <= 0 or not self._read(left):
                pytest.fail(f"never printed {text!r}: {self.seen.decode(errors='replace')}")

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """The exit status and everything printed, once the command exits by itself."""
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            self._read(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running {timeout} s later: {self.seen.decode(errors='replace')}")
        while self._read(0.2):  # what is left in the pty
            pass
        return self.proc.returncode, self.seen.decode(errors="replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            return False
        self.seen += chunk
        return bool(chunk)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal((*REFUND, "--store", str(tmp_path / "runs.sqlite")), tmp_path)
    yield term
    term.close()


def test_ctrl_c_at_the_approval_prompt_ends_the_command(terminal: Terminal) -> None:
    terminal.expect(PROMPT)
    terminal.send(b"\x03")  # Ctrl-C: the terminal sends SIGINT
    code, out = terminal.finish()
    assert code == 130, out
    assert "Traceback" not in out, out
    assert "podium run: interrupted; resume with: podium run refunds --resume run_" in out


def test_ctrl_d_at_the_approval_prompt_leaves_the_run_waiting(terminal: Terminal) -> None:
    terminal.expect(PROMPT)
    terminal.send(b"\x04")  # Ctrl-D at the start of a line: end of input
    code, out = terminal.finish()
    assert code == 3, out
    assert "Traceback" not in out and "EOFError" not in out, out
    assert "is waiting for a human decision; decide with: podium run refunds --resume" in out


def test_ctrl_d_at_the_rejection_message_leaves_the_run_waiting(terminal: Terminal) -> None:
    terminal.expect(PROMPT)
    terminal.send(b"r\n")
    terminal.expect(b"message for the model> ")
    terminal.send(b"\x04")
    code, out = terminal.finish()
    assert code == 3 and "Traceback" not in out, out


def test_an_approval_typed_at_the_prompt_completes_the_run(terminal: Terminal) -> None:
    terminal.expect(PROMPT)
    terminal.send(b"a\n")
    code, out = terminal.finish()
    assert code == 0, out
    assert "refunded 250 on A-1001" in out and " completed in " in out, out


CREDIT = ("run", "refunds", "Credit A-1001 to my account")
# Every prompt `podium run` shows, reached by the keys before it: Ctrl-C (exit 130, the run
# resumable) and Ctrl-D (exit 3, the run left waiting) each end the command at every one.
PROMPTS = {
    "rejection message": (REFUND, (PROMPT, b"r\n"), b"message for the model> "),
    "edited arguments": (REFUND, (PROMPT, b"e\n"), b"arguments (JSON)> "),
    "interrupt answer": (CREDIT, (), b"answer> "),
}


@pytest.mark.parametrize("key", [b"\x03", b"\x04"], ids=["ctrl-c", "ctrl-d"])
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_ctrl_c_and_ctrl_d_end_every_prompt(prompt: str, key: bytes, tmp_path: Path) -> None:
    args, before, shown = PROMPTS[prompt]
    term = Terminal((*args, "--store", str(tmp_path / "runs.sqlite")), tmp_path)
    try:
        if before:
            term.expect(before[0])
            term.send(before[1])
        term.expect(shown)
        term.send(key)
        code, out = term.finish()
    finally:
        term.close()
    assert "Traceback" not in out and "EOFError" not in out, out
    if key == b"\x03":
        assert code == 130, out
        assert "podium run: interrupted; resume with: podium run refunds --resume run_" in out
    else:
        assert code == 3, out
        assert "is waiting for a human decision; decide with: podium run refunds --resume" in out
