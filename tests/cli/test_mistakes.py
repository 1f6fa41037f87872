"""Mistakes a user makes on the command line: each one exits non-zero with one clear line on
stderr, and never a traceback. The real ``podium`` command runs in a process of its own: a
subprocess, or (for the many one-line mistakes) a child forked from a process that has
imported Podium once (:mod:`tests.cli.forkserver`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def podium_cmd(*args: str, pre: str = "") -> list[str]:
    """The command line of ``podium ARGS`` (``pre``: Python run first, e.g. to hide a module)."""
    if not pre:
        return [sys.executable, "-m", "podium.cli.main", *args]
    code = f"{pre}; import sys; from podium.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code, *args]


def env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child ``podium``, without its ``PODIUM_*``
    settings (a developer's own would change what the tests see), plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("PODIUM_")}
    return {**base, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "COLUMNS": "200",
            **(extra or {})}


def podium(
    *args: str, cwd: Path, pre: str = "", extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        podium_cmd(*args, pre=pre), cwd=cwd, env=env(extra_env), capture_output=True, text=True,
        timeout=60,
    )


class Forked:
    """``podium ARGS`` in a child forked from :mod:`tests.cli.forkserver`: its own process,
    as :func:`podium` starts one, without the interpreter's start and the imports."""

    def __init__(self) -> None:
        self.outputs = Path(tempfile.mkdtemp(prefix="podium-forked-"))  # the children's
        self.server = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forkserver.py"))], env=env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, *args: str, cwd: Path,
                 extra_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        out, err = self.outputs / "stdout", self.outputs / "stderr"
        req = {"argv": list(args), "cwd": str(cwd), "env": env(extra_env), "stdout": str(out),
               "stderr": str(err)}
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write(json.dumps(req) + "\n")
        self.server.stdin.flush()
        code = json.loads(self.server.stdout.readline())["code"]
        done = subprocess.CompletedProcess(["podium", *args], code, out.read_text(),
                                           err.read_text())
        out.unlink()
        err.unlink()
        return done

    def close(self) -> None:
        assert self.server.stdin is not None
        self.server.stdin.close()
        self.server.wait(timeout=60)
        assert self.server.stdout is not None
        self.server.stdout.close()
        shutil.rmtree(self.outputs, ignore_errors=True)


def assert_one_line_error(out: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode != 0, out
    assert "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1, out.stderr
    assert needle in lines[0], lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def not_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "runs.sqlite"
    path.write_text("this is not a database\n")
    return path


NOT_SQLITE = "is not a SQLite database"

CASES: list[tuple[str, tuple[str, ...], str]] = [
    ("run-store-not-sqlite", ("run", "react", "hi", "--store", "{not_sqlite}"), NOT_SQLITE),
    ("bench-store-not-sqlite", ("bench", "--runs", "2", "--store", "{not_sqlite}"), NOT_SQLITE),
    (
        "serve-store-not-sqlite",
        ("serve", "--agent", "react", "--store", "sqlite:{not_sqlite}"),
        NOT_SQLITE,
    ),
    ("run-store-missing-dir", ("run", "react", "hi", "--store", "/no/such/r.db"), "not exist"),
    ("run-store-url", ("run", "react", "hi", "--store", "redis://h:1/0"), "sqlite:PATH"),
    ("run-store-memory-colon", ("run", "react", "hi", "--store", "memory:"), "sqlite:PATH"),
    ("resume-without-store", ("run", "react", "--resume", "run_x"), "--resume needs"),
    ("resume-unknown-id", ("run", "react", "--resume", "run_no", "--store", "{db}"), "no run"),
    ("run-no-input", ("run", "react"), "give an input"),
    ("run-missing-config", ("run", "react", "hi", "--config", "/no/such.toml"), "not found"),
    ("run-bad-config", ("run", "react", "hi", "--config", "{bad_toml}"), "colour"),
    ("run-unknown-agent", ("run", "nope", "hi"), "use package.module:attribute"),
    ("run-agent-import", ("run", "no_such_mod:agent", "hi"), "cannot import"),
    ("run-undecorated-tool", ("run", "tests.cli.cli_agents:undecorated", "hi"), "decorate"),
    ("sim-server-busy-port", ("sim-server", "--port", "{busy_port}"), "cannot listen"),
    ("serve-log-level", ("serve", "--log-level", "verbose"), "unknown log level 'verbose'"),
    ("worker-log-level", ("worker", "--agent", "react", "--log-level", "loud"), "log level"),
    ("worker-bad-agent", ("worker", "--agent", "nope"), "use package.module:attribute"),
    ("worker-bad-agent-name-form", ("worker", "--agent", "support=nope"), "agent 'nope'"),
    ("worker-empty-name-form", ("worker", "--agent", "=react"), "NAME=package.module"),
    ("worker-rediss", ("worker", "--agent", "react", "--redis", "rediss://h:6379/0"), "TLS"),
    ("worker-unix", ("worker", "--agent", "react", "--redis", "unix:///tmp/r.sock"), "unix"),
    ("worker-bad-port", ("worker", "--agent", "react", "--redis", "redis://h:p/0"), "malformed"),
    ("worker-not-redis-url", ("worker", "--agent", "react", "--redis", "http://h/0"), "malformed"),
    ("worker-url-db", ("worker", "--agent", "react", "--redis", "redis://h:1/zero"), "database"),
    ("worker-url-db-digit", ("worker", "--agent", "react", "--redis", "redis://h:1/²"), "database"),
    ("worker-empty-pool", ("worker", "--pool", "x", "--config", "{toml}"), "in pool 'x'"),
    ("serve-rediss", ("serve", "--agent", "react", "--redis", "rediss://h:1/0"), "TLS"),
    ("serve-malformed-url", ("serve", "--agent", "react", "--redis", "redis//h"), "malformed"),
    ("bench-negative-runs", ("bench", "--runs", "-5"), "--runs"),
    # Each was a 500 per request (a traceback in the server's log) or an odd server.
    ("sim-negative-tokens", ("sim-server", "--output-tokens", "-3"), "--output-tokens"),
    ("sim-negative-steps", ("sim-server", "--tool-steps", "-1"), "--tool-steps"),
    ("sim-nan-loading", ("sim-server", "--loading-s", "nan"), "--loading-s"),
    ("sim-empty-model", ("sim-server", "--model", ""), "--model: must not be empty"),
    ("bench-zero-concurrency", ("bench", "--concurrency", "0"), "--concurrency"),
    # Printed as "error: ..." without the command, the --sessions one wrapped on two lines.
    ("bench-sweep-zero", ("bench", "--sweep", "0,10"),
     "podium bench: error: --sweep '0,10': concurrencies must be at least 1"),
    ("bench-sessions-zero",
     ("bench", "--overhead", "--sessions", "0,1000000000000,1000000000000,1000000000000"),
     "podium bench: error: --sessions '0,1000000000000,1000000000000,1000000000000': give"),
    # The options of one mode were silently ignored by the other.
    ("bench-sessions-without-overhead", ("bench", "--sessions", "1"),
     "podium bench: error: --sessions: only with --overhead"),
    ("bench-no-profile-without-overhead", ("bench", "--no-profile", "--rounds", "2"),
     "--rounds, --no-profile: only with --overhead"),
    ("bench-runs-with-overhead", ("bench", "--overhead", "--runs", "5"),
     "--runs: only for a load test, not with --overhead"),
    ("bench-unknown-tool", ("bench", "--scenario", "{scenario}"), "'nope'"),
    ("bench-missing-scenario", ("bench", "--scenario", "/no/such.toml"), "scenario"),
    # Ran as no wait at all, and as a tool failing every call.
    ("bench-negative-ttft", ("bench", "--scenario", "{neg_ttft}"),
     "model.ttft_ms: Expected `float` >= 0.0"),
    ("bench-error-rate-above-1", ("bench", "--scenario", "{error_rate}"),
     "tools[0].error_rate: Expected `float` <= 1.0"),
    ("bench-infinite-latency", ("bench", "--scenario", "{inf_latency}"),
     "tools[0].latency_ms: must be a finite number"),
    # Refused before the load test, not after it (a million runs would pass the timeout).
    (
        "bench-report-missing-dir",
        ("bench", "--runs", "1000000", "--report", "/no/such/r.html"),
        "directory '/no/such' does not exist",
    ),
    ("bench-report-is-dir", ("bench", "--runs", "1000000", "--report", "{tmp}"), "a directory"),
    (
        "runs-profile-report-missing-dir",
        ("runs", "profile", "--store", "{db}", "--report", "/no/such/p.html"),
        "does not exist",
    ),
    ("runs-no-store", ("runs", "list"), "podium runs list: error: give a store"),
    # --redis was silently ignored, and a window ending before it starts listed 0 runs.
    ("runs-store-and-redis",
     ("runs", "list", "--store", "x.db", "--redis", "redis://127.0.0.1:6379/0"),
     "podium runs list: error: argument --redis: not allowed with argument --store"),
    ("runs-since-after-until", ("runs", "list", "--store", "x.db", "--since", "1d", "--until",
                                "2d"), "--since '1d' is after --until '2d'"),
    ("runs-profile-since-after-until",
     ("runs", "profile", "--store", "x.db", "--since", "2030-01-01", "--until", "2020-01-01"),
     "podium runs profile: error: --since '2030-01-01' is after --until '2020-01-01'"),
    ("unknown-command", ("frobnicate",), "invalid choice"),
    # Said by the top parser (podium: error: ... see podium --help), not the subcommand.
    ("run-unknown-option", ("run", "react", "hi", "--bogus"),
     "podium run: error: unrecognized arguments: --bogus (see podium run --help)"),
    ("runs-list-unknown-option", ("runs", "list", "--store", "x.db", "--bogus"),
     "podium runs list: error: unrecognized arguments: --bogus"),
    ("serve-port-range", ("serve", "--agent", "react", "--port", "99999"), "0 (any free one)"),
    ("serve-port-busy", ("serve", "--agent", "react", "--port", "{busy_port}"), "cannot listen"),
    ("serve-unknown-host", ("serve", "--agent", "react", "--host", "no-such-host.invalid"),
     "cannot listen on no-such-host.invalid"),
    # With port 0 there was no probe before the bind: uvicorn's own failure, in many lines.
    ("serve-port-0-host-not-ours",  # 192.0.2.1: TEST-NET-1, no machine's address
     ("serve", "--agent", "react", "--host", "192.0.2.1", "--port", "0"),
     "port 0: cannot listen on 192.0.2.1"),
    ("sim-server-port-range", ("sim-server", "--port", "-1"), "to 65535"),
    ("worker-metrics-port-range", ("worker", "--agent", "react", "--metrics-port", "70000"),
     "to 65535"),
    (
        "worker-metrics-port-busy",
        ("worker", "--agent", "react", "--prefix", "mistakes-busy", "--metrics-port",
         "{busy_port}"),
        "cannot listen",
    ),
    (
        "supervisor-metrics-port-busy",
        ("worker", "--agent", "react", "--prefix", "mistakes-busy", "--procs", "2",
         "--metrics-port", "{busy_port}"),
        "cannot listen",
    ),
    ("config-unknown-key", ("serve", "--config", "{bad_toml}"), "colour"),
    # podium.toml as a clumsy or hostile operator writes it (see FILES).
    ("config-is-a-directory", ("serve", "--config", "{tmp}"), "is a directory"),
    ("config-not-utf8", ("run", "react", "hi", "--config", "{binary}"), "not UTF-8"),
    ("config-empty-path", ("worker", "--agent", "react", "--config", ""), "must not be empty"),
    ("config-typo", ("worker", "--config", "{typo}"), "did you mean 'workers'?"),
    ("config-string-port", ("serve", "--config", "{string_port}"), "server.port: Expected `int`"),
    ("config-redis-http", ("serve", "--config", "{redis_http}"), "server.redis"),
    ("config-store-scheme", ("serve", "--config", "{store_pg}"), "'sqlite:PATH', 'memory' or a"),
    ("config-duplicate-agents", ("serve", "--port", "0", "--config", "{dup_agents}"),
     "two agents are named 'a'"),
    ("config-agent-factory-raises", ("serve", "--port", "0", "--config", "{broken}"),
     "raised RuntimeError: no model configured"),
    ("config-agent-not-an-agent", ("serve", "--port", "0", "--config", "{not_agent}"),
     "returned a str, not an Agent"),
    ("config-agent-object-not-an-agent", ("worker", "--config", "{not_agent_object}"),
     "is a int, not an Agent"),
    ("config-agent-no-module", ("run", "a", "hi", "--config", "{no_module}"), "cannot import"),
    ("serve-store-option-scheme", ("serve", "--port", "0", "--store", "pg://x"), "--store: use"),
    ("serve-empty-prefix", ("serve", "--prefix", ""), "--prefix: must not be empty"),
    ("serve-ttl-nan", ("serve", "--ttl", "nan"), "--ttl: must be a finite number"),
    ("worker-ttl-inf", ("worker", "--agent", "react", "--ttl", "inf"), "finite"),
    ("worker-grace-negative", ("worker", "--agent", "react", "--grace", "-5"), "--grace"),
    ("worker-lease-inf", ("worker", "--agent", "react", "--lease", "inf"), "--lease"),
    # An empty value (an unset shell variable) started a server, ran the default bench, or
    # listed every run; each is refused by name.
    ("serve-empty-hash-key", ("serve", "--hash-key", ""), "--hash-key: must not be empty"),
    ("serve-empty-model", ("serve", "--agent", "react", "--model", ""), "--model: must not"),
    ("bench-empty-sweep", ("bench", "--sweep", ""), "--sweep: must not be empty"),
    ("bench-empty-report", ("bench", "--report", ""), "--report: must not be empty"),
    ("run-empty-resume", ("run", "react", "--resume", "", "--store", "x.db"), "--resume: must"),
    ("runs-empty-prefix",
     ("runs", "list", "--redis", "redis://127.0.0.1:6379/0", "--prefix", ""),
     "podium runs list: error: argument --prefix: must not be empty"),
    ("runs-empty-agent", ("runs", "list", "--store", "x.db", "--agent", ""), "--agent: must not"),
    # A coroutine was refused but left to Python's "never awaited" warning, a second line.
    ("run-async-factory", ("run", "tests.cli.cli_agents:async_factory", "hi"),
     "is an async function: make it a plain function"),
    ("config-async-factory", ("serve", "--port", "0", "--config", "{async_factory}"),
     "is an async function"),
    # A file path said "the 'package' argument is required to perform a relative import".
    ("run-file-path-agent", ("run", "./tests/cli/cli_agents.py:slow", "hi"),
     "not a file path: try tests.cli.cli_agents:slow"),
    ("run-absolute-file-path", ("run", "/no/such/agents.py:agent", "hi"),
     "give a module path (package.module:attribute), not a file path"),
    ("config-empty-pool-name", ("worker", "--agent", "react", "--config", "{empty_pool}"),
     '[pools.""]: a pool\'s name must not be empty'),
]

#: Files the cases above name as {key}, written into the test's directory.
FILES = {
    "typo": "[pools.default]\nwokers = 2\n",
    "string_port": '[server]\nport = "8000"\n',
    "redis_http": '[server]\nredis = "http://127.0.0.1:6379/0"\n',
    "store_pg": '[server]\nstore = "mysql://db/podium"\n',
    "dup_agents": '[[agents]]\nname = "a"\npath = "react"\n'
                  '[[agents]]\nname = "a"\npath = "research"\n',
    "broken": '[[agents]]\npath = "tests.cli.cli_agents:broken"\n',
    "not_agent": '[[agents]]\npath = "tests.cli.cli_agents:not_an_agent"\n',
    "not_agent_object": '[[agents]]\npath = "tests.cli.cli_agents:NOT_AN_AGENT"\n',
    "no_module": '[[agents]]\nname = "a"\npath = "no_such_module_here:agent"\n',
    "async_factory": '[[agents]]\npath = "tests.cli.cli_agents:async_factory"\n',
    "neg_ttft": "[model]\nttft_ms = -100\n",
    "error_rate": '[[tools]]\nname = "lookup"\nerror_rate = 2\n',
    "inf_latency": '[[tools]]\nname = "lookup"\nlatency_ms = inf\n',
    "empty_pool": '[pools.""]\nworkers = 1\n',
}


@pytest.mark.parametrize(("args", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_mistake_is_one_line(
    args: tuple[str, ...], needle: str, tmp_path: Path, busy_port: int, not_sqlite: Path,
    forked: Forked,
) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[script]\ntool = "nope"\n')
    toml = tmp_path / "workers.toml"
    toml.write_text('[[agents]]\nname = "support"\npath = "react"\npool = "support"\n')
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[server]\ncolour = "blue"\n')
    db = tmp_path / "runs.db"
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    values = {
        "not_sqlite": str(not_sqlite), "busy_port": str(busy_port), "scenario": str(scenario),
        "toml": str(toml), "bad_toml": str(bad_toml), "db": str(db), "tmp": str(tmp_path),
        "binary": str(binary),
    }
    for key, text in FILES.items():
        (tmp_path / f"{key}.toml").write_text(text)
        values[key] = str(tmp_path / f"{key}.toml")
    if "{db}" in args:  # an existing store without that run
        assert forked("run", "react", "hi", "--store", str(db), "-q", cwd=tmp_path).returncode == 0
    out = forked(*(a.format(**values) for a in args), cwd=tmp_path)
    assert_one_line_error(out, needle)


@pytest.mark.parametrize(
    ("variables", "needle"),
    [
        ({"PODIUM_SERVER__PORT": "eighty"}, "PODIUM_SERVER__PORT: expected a whole number"),
        ({"PODIUM_SERVER__PORT": "99999"}, "PODIUM_SERVER__PORT (server.port)"),
        ({"PODIUM_SERVR__PORT": "9000"}, "PODIUM_SERVR__PORT: no section 'servr'"),
        ({"PODIUM_POOLS__DEFAULT__WOKERS": "2"}, "no setting 'wokers'"),
        ({"PODIUM_SERVER__STORE": ""}, "PODIUM_SERVER__STORE is empty"),
        ({"PODIUM_SERVER__REDIS": "rediss://h:1/0"}, "TLS"),
        ({"PODIUM_AGENTS": "a=react,a=research"}, "two agents are named 'a'"),
        ({"PODIUM_KEYS": "pk_same=acme,pk_same=other"}, "same key is given twice"),
        ({"PODIUM_GC": "lots"}, "PODIUM_GC: expected 'default' or three whole numbers"),
        # Read as off without a word: no traces, and no reason.
        ({"PODIUM_TRACING": "maybe"}, "PODIUM_TRACING='maybe': use 1 or true"),
        ({"PODIUM_TRACING": "TRUE"}, "PODIUM_TRACING='TRUE'"),
    ],
    ids=["type", "range", "section", "field", "empty", "rediss", "dup-agents", "dup-keys", "gc",
         "tracing", "tracing-case"],
)
def test_bad_environment_is_one_line(
    variables: dict[str, str], needle: str, tmp_path: Path
) -> None:
    out = podium("serve", "--port", "0", "--store", "memory", cwd=tmp_path, extra_env=variables)
    assert_one_line_error(out, needle)


@pytest.mark.parametrize(
    "args",
    # (--port 0: the port is checked first, and 8000 may be taken on a shared machine)
    [
        ("worker", "--agent", "react"),
        ("serve", "--agent", "react", "--redis", "redis://h:1/0", "--port", "0"),
    ],
    ids=["worker", "serve-redis"],
)
@pytest.mark.parametrize("module", ["redis", "hiredis"])
def test_missing_redis_extra_names_it(args: tuple[str, ...], module: str, tmp_path: Path) -> None:
    out = podium(*args, cwd=tmp_path, pre=f"import sys; sys.modules[{module!r}] = None")
    assert_one_line_error(out, "pip install 'podium[redis]'")


def _interrupt(proc: subprocess.Popen[str], ready: str) -> tuple[int, str, str]:
    """Read stdout until ``ready`` appears, send SIGINT, return (code, stdout, stderr)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            break
    else:
        pytest.fail(f"never ready: {''.join(seen)} {proc.stderr.read() if proc.stderr else ''}")
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()  # and read its pipes to the end: none is left open for a later test
        out, err = proc.communicate()
        pytest.fail(f"still running 60 s after Ctrl-C: {''.join(seen)}{out} {err}")
    return proc.returncode, "".join(seen) + out, err


def test_ctrl_c_on_run_says_how_to_resume(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    args = ("run", "tests.cli.cli_agents:slow", "go", "--store", str(store))
    proc = subprocess.Popen(
        podium_cmd(*args), cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    code, _, err = _interrupt(proc, "step 2")
    assert code == 130 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--resume run_" in lines[0] and str(store) in lines[0], err
    run_id = lines[0].split("--resume ")[1].split()[0]
    # What it says works: the run continues from its checkpoint (here: interrupted again).
    proc = subprocess.Popen(
        podium_cmd("run", "tests.cli.cli_agents:slow", "--resume", run_id, "--store", str(store)),
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    code, _, err = _interrupt(proc, "step")
    assert code == 130 and f"--resume {run_id}" in err


def test_ctrl_c_on_bench_and_serve_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        podium_cmd("bench", "--runs", "10000000", "--concurrency", "10", "--loop", "asyncio"),
        cwd=tmp_path, env=env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    code, _, err = _interrupt(proc, "bench: running")
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines() == ["podium bench: interrupted"], err

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        podium_cmd("serve", "--agent", "react", "--store", "memory", "--port", str(port)),
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    code, out, _ = _interrupt(proc, "Application startup complete")
    assert code == 130 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1] == "podium serve: stopped (interrupted)", out


def test_version_and_help(capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process: the test is about the texts, and five interpreters starting took
    # most of its time (the subprocess's own exit paths are pinned by the other tests).
    import podium

    assert podium_in_process(capsys, monkeypatch, "--version") == f"podium {podium.__version__}\n"
    serve_help = podium_in_process(capsys, monkeypatch, "serve", "--help")
    assert "``" not in serve_help and "::" not in serve_help
    assert "(default: INFO)" in serve_help
    worker_help = podium_in_process(capsys, monkeypatch, "worker", "--help")
    assert "(default: 256)" in worker_help and "(default: 3)" in worker_help
    assert "(default: 64)" in podium_in_process(capsys, monkeypatch, "sim-server", "--help")
    # Every built-in, from the registry (research-team was missing from a list by hand).
    from podium.factory import BUILTIN_AGENTS

    run_help = " ".join(podium_in_process(capsys, monkeypatch, "run", "--help").split())
    assert f"a built-in: {', '.join(BUILTIN_AGENTS)}" in run_help, run_help


def podium_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                      *args: str) -> str:
    """``podium ARGS`` that exits 0 with nothing on stderr, run by ``main`` in this process
    with the child's environment (:func:`env`): its stdout."""
    from podium.cli.main import main

    for name in [k for k in os.environ if k.upper().startswith("PODIUM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, None) and out.err == "", out.err
    return out.out


def _nobody_listens() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def test_a_burst_worker_gives_up_on_a_redis_that_never_answers(tmp_path: Path) -> None:
    """A batch job pointed at the wrong Redis used to retry for ever; now it says so at
    start, and exits 1 once ``--burst-patience`` has passed without an answer."""
    url = _nobody_listens()
    out = podium("worker", "--redis", url, "--agent", "react", "--burst",
                 "--burst-patience", "1", "--log-level", "error", cwd=tmp_path)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr, out.stderr
    assert f"warning: {url} does not answer" in out.stderr, out.stderr
    assert "has not answered for 1s; a --burst worker gives up" in out.stderr, out.stderr


def test_serve_says_when_its_redis_does_not_answer(tmp_path: Path) -> None:
    url = _nobody_listens()
    proc = subprocess.Popen(
        podium_cmd("serve", "--redis", url, "--agent", "react", "--port", "0"),
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    code, out, _ = _interrupt(proc, "Application startup complete")
    assert "does not answer" in out and "starting anyway" in out, out
    assert code == 130 and "Traceback" not in out, out


def test_ctrl_c_on_a_worker_drains_and_exits_130(tmp_path: Path, shared_redis_url: str) -> None:
    prefix = f"ctrlc-{os.getpid()}"
    proc = subprocess.Popen(
        podium_cmd("worker", "--redis", shared_redis_url, "--prefix", prefix, "--agent",
                   "react", "--procs", "0"),
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    code, out, _ = _interrupt(proc, " ready ")
    assert code == 130 and "Traceback" not in out, out
    assert " done {" in out, out  # it drained and said so first


def test_ctrl_c_on_sim_server_exits_130(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        podium_cmd("sim-server", "--port", "0"), cwd=tmp_path, env=env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    code, _, err = _interrupt(proc, "listening on")
    assert code == 130 and err.strip() == "sim-server stopped (interrupted)", err


def test_resume_with_another_agent_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.sqlite")
    first = podium("run", "refunds", "Refund 250 on order A-1001", "--store", store, "--json",
                   cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # waiting for a human
    run_id = json.loads(first.stdout)["run_id"]
    out = podium("run", "research-team", "--resume", run_id, "--store", store, "--approve",
                 cwd=tmp_path)
    assert_one_line_error(out, "belongs to agent 'refunds', not 'research-team'")
    assert f"podium run refunds --resume {run_id}" in out.stderr


def test_resume_of_a_run_another_process_may_drive_is_refused(tmp_path: Path) -> None:
    """A `podium serve` on the file takes up its queued and running runs: a `--resume` of
    one alongside ran its calls a second time (a side effect three times, as probed)."""
    store = str(tmp_path / "runs.sqlite")
    holder = (
        "import asyncio, sys\n"
        "from podium import Engine\n"
        "from podium.examples import react\n"
        "from podium.store.sqlite import SQLiteRunStore\n"
        "async def main():\n"
        "    async with SQLiteRunStore(sys.argv[1]) as store:\n"
        "        record = await Engine(store).create(react.agent, 'hold it')\n"
        "        print(record.run_id, flush=True)\n"
        "        sys.stdin.readline()\n"
        "asyncio.run(main())\n"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", holder, store], cwd=tmp_path, env=env(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert driver.stdout is not None
        run_id = driver.stdout.readline().strip()
        out = podium("run", "react", "--resume", run_id, "--store", store, cwd=tmp_path)
    finally:
        driver.communicate("\n", timeout=30)
    assert_one_line_error(out, f"run {run_id} is queued and another process")
    assert "may be driving the run" in out.stderr
    if Path("/proc/locks").exists():  # Linux says who holds the lock
        assert f"(pid {driver.pid})" in out.stderr
    alone = podium("run", "react", "--resume", run_id, "--store", store, "--json", cwd=tmp_path)
    assert alone.returncode == 0 and json.loads(alone.stdout)["status"] == "completed", alone


def test_run_takes_a_store_spelled_sqlite_path(tmp_path: Path) -> None:
    """`sqlite:PATH` is how `podium serve` and `podium runs` take a store: `podium run`
    made a file named `sqlite:runs.sqlite` of it, which `podium runs` then could not find."""
    out = podium("run", "react", "hi", "--store", "sqlite:runs.sqlite", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "runs.sqlite").is_file() and not (tmp_path / "sqlite:runs.sqlite").exists()
    run_id = json.loads(out.stdout)["run_id"]
    shown = podium("runs", "show", run_id, "--store", "sqlite:runs.sqlite", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
