"""What a user gives the commands besides options: stdin, the environment, a store the
server cannot create, the access log. Each mistake is one line and exit status 2."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from tests.cli.test_mistakes import Forked, assert_one_line_error, env, podium, podium_cmd

pytestmark = pytest.mark.slow


def test_run_reads_its_input_from_stdin(tmp_path: Path) -> None:
    out = subprocess.run(
        podium_cmd("run", "react", "-", "--json"), cwd=tmp_path, env=env(),
        input="What is Podium?\n", capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"status":"completed"' in out.stdout, out.stdout


def test_run_refuses_an_empty_stdin(tmp_path: Path) -> None:
    out = subprocess.run(
        podium_cmd("run", "react", "-"), cwd=tmp_path, env=env(), input="\n",
        capture_output=True, text=True, timeout=60,
    )
    assert_one_line_error(out, "input from stdin ('-') is empty")
    assert out.returncode == 2


@pytest.mark.parametrize(
    ("store", "needle"),
    [
        ("sqlite:{file}/runs.sqlite", "is a file, not a directory"),
        ("sqlite:/proc/runs.sqlite", "/proc/runs.sqlite"),  # the store, or its key file
    ],
    ids=["parent-is-a-file", "proc"],
)
def test_serve_with_a_store_it_cannot_create_is_one_line(
    store: str, needle: str, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("")
    out = podium("serve", "--agent", "react", "--port", "0",
                 "--store", store.format(file=tmp_path / "afile"), cwd=tmp_path)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if "error" in line.lower()]
    assert errors == [next(e for e in errors if needle in e)], out.stderr
    assert errors[0].startswith("podium serve: error: ")


@pytest.mark.parametrize(
    ("variables", "needle"),
    [
        ({"PODIUM_BLOCKING_MS": "soon"}, "PODIUM_BLOCKING_MS='soon': expected a number >= 0"),
        ({"PODIUM_BLOCKING_MS": "-5"}, "PODIUM_BLOCKING_MS='-5'"),
        ({"PODIUM_TRACES_PER_SECOND": "many"}, "PODIUM_TRACES_PER_SECOND='many'"),
        ({"PODIUM_TRACES_PER_SECOND": "nan"}, "PODIUM_TRACES_PER_SECOND='nan'"),
        ({"PODIUM_DATA_DIR": "/no/such/dir"}, "PODIUM_DATA_DIR='/no/such/dir': not an existing"),
        ({"PODIUM_FETCH_ALLOW_HOSTS": "a.com,,b.org"}, "PODIUM_FETCH_ALLOW_HOSTS="),
        ({"PODIUM_FETCH_ALLOW_HOSTS": "https://a.com"}, "expected host names"),
        ({"PODIUM_MODEL": " "}, "PODIUM_MODEL is empty"),
    ],
    ids=["blocking-word", "blocking-negative", "traces-word", "traces-nan", "data-dir",
         "hosts-empty", "hosts-url", "model-empty"],
)
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_bad_podium_variables_are_one_line(
    variables: dict[str, str], needle: str, command: str, tmp_path: Path, forked: Forked
) -> None:
    args = (("serve", "--port", "0", "--store", "memory") if command == "serve"
            else ("worker", "--agent", "react", "--redis", "redis://127.0.0.1:1/0"))
    out = forked(*args, cwd=tmp_path, extra_env=variables)
    assert_one_line_error(out, needle)
    assert out.returncode == 2


def test_empty_instructions_in_the_file_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "podium.toml"
    config.write_text('[[agents]]\nname = "a"\ninstructions = ""\n')
    out = podium("serve", "--port", "0", "--config", str(config), cwd=tmp_path)
    assert_one_line_error(out, "agents[0].instructions: must not be empty")


@pytest.mark.parametrize("access_log", [True, False])
def test_serve_logs_requests_with_access_log(access_log: bool, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["serve", "--agent", "react", "--store", "memory", "--port", str(port)]
    if access_log:
        args.append("--access-log")
    proc = subprocess.Popen(
        podium_cmd(*args), cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Application startup complete" in line:
            break
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as reply:
        assert reply.status == 200
    code, out, _ = _interrupt_now(proc)
    assert code == 130, out
    logged = [line for line in out.splitlines() if '"GET /healthz HTTP/1.1" 200' in line]
    assert len(logged) == (1 if access_log else 0), out


def _interrupt_now(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Ctrl-C a server that is ready, and what it printed until it exited."""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err or ""

