"""The sandbox: code runs confined, or not at all. Each escape is tried for real."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from _sandboxed_tools import (
    nap_past_the_tool,
    nap_past_the_wall,
    read_file,
    shout,
    word_count,
)

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool_call_reply
from podium.engine.driver import Engine
from podium.messages import Message
from podium.security.sandbox import (
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxUnavailable,
)
from podium.tools import ToolContext, ToolExecutor, ToolResult
from podium.tools.sandboxed import run_python, run_python_tool

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOX = Sandbox(SandboxLimits(cpu_s=2, wall_s=10, memory_bytes=256 << 20, processes=16))
if BOX.bwrap is None:
    pytest.skip("bubblewrap (bwrap) is not installed (.ci/run installs it)",
                allow_module_level=True)


@pytest.fixture(autouse=True)
def _sandbox_usable() -> None:
    # Installed, it must work: a probe that fails is a failure with its reason, never a
    # skip that hides a present tool (a busy machine once made the full run skip these).
    assert BOX.available(), BOX.unavailable_reason


async def run(code: str) -> tuple[int, str, str, str | None]:
    r = await BOX.run_python(code)
    return r.exit_code, r.stdout, r.stderr, r.killed


async def test_runs_code_and_returns_its_output() -> None:
    assert await run("print(sum(range(10)))") == (0, "45\n", "", None)


async def test_cannot_read_outside_its_scratch_dir(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    for path in (secret, Path(__file__), Path("/etc/passwd"), Path.home() / ".bashrc"):
        code, out, err, _ = await run(f"print(open({str(path)!r}).read())")
        assert code == 1 and "s3cret" not in out, path
        assert "No such file or directory" in err or "Permission denied" in err
    code, out, _, _ = await run("import os; print(sorted(os.listdir('/')))")
    assert code == 0
    assert "work" not in out and "home" not in out and "tmp" not in out


async def test_cannot_write_to_the_root_filesystem() -> None:
    for path in ("/evil", "/usr/evil", "/usr/lib/evil"):
        code, _, err, _ = await run(f"open({path!r}, 'w').write('x')")
        assert code == 1 and "Read-only file system" in err, path
    code, out, _, _ = await run("open('/scratch/ok', 'w').write('x'); print(open('ok').read())")
    assert (code, out) == (0, "x\n")


async def test_has_no_network() -> None:
    for host, port in (("127.0.0.1", 6379), ("1.1.1.1", 80)):
        code, out, err, _ = await run(
            f"import socket; socket.create_connection(({host!r}, {port}), timeout=3); "
            "print('CONNECTED')"
        )
        assert code == 1 and "CONNECTED" not in out
        assert "Connection refused" in err or "Network is unreachable" in err


async def test_fork_bomb_hits_the_process_limit() -> None:
    code, out, _, _ = await run(
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n)\n"
    )
    assert code == 0 and out.startswith("stopped")
    assert int(out.split()[1]) < 16


async def test_memory_past_the_limit_fails() -> None:
    code, out, err, killed = await run("x = bytearray(1 << 30); print('ALLOCATED')")
    assert code == 1 and "ALLOCATED" not in out and "MemoryError" in err
    assert killed == "memory"


async def test_a_program_that_succeeds_is_not_reported_as_stopped_by_a_limit() -> None:
    """The limit was guessed from words anywhere on stderr, even after exit 0: a program
    that handled a MemoryError (or logged 'File too large') was reported as stopped by the
    memory limit, and the run_python tool replaced its output with that error."""
    code = (
        "import sys\n"
        "try:\n"
        "    x = bytearray(1 << 40)\n"
        "except MemoryError:\n"
        "    print('MemoryError: too big, using less', file=sys.stderr)\n"
        "print('File too large? no: fine', file=sys.stderr)\n"
        "print(42)\n"
    )
    assert await run(code) == (
        0,
        "42\n",
        "MemoryError: too big, using less\nFile too large? no: fine\n",
        None,
    )
    ran = await run_python_tool(BOX).fn(code=code)
    assert ran.startswith("42\n") and "limit" not in ran
    # A traceback that ends in the error is still the limit.
    _, _, _, killed = await run("open('/scratch/f', 'w')\nx = bytearray(1 << 40)")
    assert killed == "memory"


async def test_infinite_loop_hits_the_cpu_limit() -> None:
    box = Sandbox(SandboxLimits(cpu_s=1, wall_s=60))  # a busy machine's second of CPU
    result = await box.run_python("while True: pass")
    assert result.killed == "cpu_time" and result.exit_code != 0


async def test_sleeping_forever_hits_the_wall_limit() -> None:
    box = Sandbox(SandboxLimits(wall_s=1.0))
    result = await box.run_python("import time; time.sleep(60)")
    assert result.killed == "wall_time"


async def test_the_wall_limit_keeps_what_was_printed_before_it() -> None:
    """At the deadline the output read so far was thrown away (the run_python tool's
    'output so far' was always empty): a program that printed progress and then hung
    told the model nothing."""
    box = Sandbox(SandboxLimits(wall_s=1.0))
    result = await box.run_python("import time; print('step 1', flush=True); time.sleep(60)")
    assert (result.killed, result.stdout) == ("wall_time", "step 1\n")
    with pytest.raises(SandboxError, match="wall_time limit; output so far: step 1"):
        await run_python_tool(box).fn(
            code="import time; print('step 1', flush=True); time.sleep(60)"
        )


async def test_output_past_the_cap_is_cut_and_says_so() -> None:
    """Output past ``output_bytes`` was dropped without a word: the model read 64 KiB as
    if that were all, and a sandboxed tool whose result passed the cap failed with a JSON
    parse error (or 'exit code 0' when the marker was cut off)."""
    result = await BOX.run_python("print('x' * 100_000)")
    assert result.ok and result.truncated and len(result.stdout) == 64 << 10
    small = await BOX.run_python("print('x' * 1000)")
    assert small.ok and not small.truncated
    said = await run_python_tool(BOX).fn(code="print('x' * 100_000)")
    assert said.endswith("[output cut at 65536 bytes]")
    assert await BOX.call("_sandboxed_tools", "big_result", {"n": 10}) == "x" * 10
    for kwargs in ({"n": 100_000}, {"n": 10, "printed": 100_000}):
        with pytest.raises(SandboxError, match="output_bytes limit of 65536 bytes"):
            await BOX.call("_sandboxed_tools", "big_result", kwargs)


async def test_file_size_limit() -> None:
    box = Sandbox(SandboxLimits(file_bytes=1 << 20))
    result = await box.run_python("open('/scratch/big', 'wb').write(b'x' * (2 << 20))")
    assert result.killed == "file_size" and "File too large" in result.stderr


async def test_refuses_clearly_without_isolation() -> None:
    box = Sandbox(bwrap="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable, match="refusing to run code without a sandbox"):
        await box.run_python("print(1)")


async def test_run_python_tool_reports_to_the_model() -> None:
    # A wall limit far past the CPU one: on a busy machine the loop's second of CPU may
    # take many seconds of wall time, and it is the CPU limit that must stop it.
    box = Sandbox(SandboxLimits(cpu_s=1, wall_s=60, memory_bytes=256 << 20, processes=16))
    run_python = run_python_tool(box)
    seen: list[Message] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(
                ("run_python", '{"code": "print(6 * 7)"}'),
                ("run_python", "{\"code\": \"open('/evil', 'w')\"}"),
                ("run_python", '{"code": "while True: pass"}'),
            )
        seen.extend(m for m in messages if m.role == "tool")
        return "done"

    agent = Agent("coder", FunctionModel(reply), tools=[run_python])
    async with Engine() as engine:
        record = await engine.run(agent, "compute")
    assert record.status == "completed"
    ok, readonly, loop = (m.content for m in seen)
    assert ok == "42\n"
    assert "Read-only file system" in readonly and "[exit code 1]" in readonly
    assert "cpu_time limit" in loop


async def test_unavailable_sandbox_is_an_observation() -> None:
    tool_ = run_python_tool(Sandbox(bwrap="/nonexistent/bwrap"))
    executor = ToolExecutor(max_threads=1)
    try:
        result: ToolResult = await executor.execute(
            tool_, tool_.decode_arguments('{"code": "print(1)"}'), _ctx()
        )
    finally:
        executor.close()
    assert not result.ok and "SandboxUnavailable" in result.content


async def test_tool_with_sandbox_runs_its_function_confined(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    executor = ToolExecutor(max_threads=1)
    try:
        counted = await executor.execute(
            word_count, word_count.decode_arguments('{"text": "a b c"}'), _ctx()
        )
        leaked = await executor.execute(
            read_file, read_file.decode_arguments(f'{{"path": "{secret}"}}'), _ctx()
        )
    finally:
        executor.close()
    assert counted.ok, counted.content
    assert '"words":3' in counted.content and f'"uid":{os.getuid()}' not in counted.content
    assert not leaked.ok and "s3cret" not in leaked.content
    assert "No such file or directory" in leaked.content


async def test_a_sandboxed_calls_timeout_message_names_the_limit_that_fired() -> None:
    """The sandbox's wall limit and the tool's own timeout are told apart in what the
    model reads: each names itself, never the other."""
    executor = ToolExecutor(max_threads=1)
    try:
        walled = await executor.execute(
            nap_past_the_wall, nap_past_the_wall.decode_arguments('{"seconds": 30}'), _ctx()
        )
        timed = await executor.execute(
            nap_past_the_tool, nap_past_the_tool.decode_arguments('{"seconds": 30}'), _ctx()
        )
    finally:
        executor.close()
    assert not walled.ok and "stopped by the sandbox's wall_time limit" in walled.content
    assert "timed out" not in walled.content, walled.content
    assert timed.error == "timeout", timed
    assert "tool 'nap_past_the_tool' timed out after 1.0s" in timed.content, timed.content
    assert "sandbox" not in timed.content


def _ctx() -> ToolContext:
    return ToolContext("run_s", 0, 0, "call_0")


async def test_defaults_sandbox_true_and_the_builtin_tool() -> None:
    assert shout.policy.sandbox is not None and not shout.inline
    executor = ToolExecutor(max_threads=1)
    try:
        loud = await executor.execute(shout, shout.decode_arguments('{"text": "hi"}'), _ctx())
        ran = await executor.execute(
            run_python, run_python.decode_arguments('{"code": "print(2 ** 10)"}'), _ctx()
        )
    finally:
        executor.close()
    assert loud.ok and loud.content == "HI"
    assert ran.ok and ran.content == "1024\n"
