"""A process that has imported ``podium`` once and forks a child per command: each child
runs ``podium.cli.main.main`` as ``python -m podium.cli.main ARGS`` would (its own process,
working directory, environment, stdout and stderr; an uncaught exception printed as a
traceback, exit 1), without starting an interpreter and importing Podium again.

Tests that check what a mistake prints use it: about half a second of start-up per case
(more on a busy machine) was most of their time. Tests about the process itself (signals,
a module hidden before import) start a real one.

Protocol: one JSON object a line on stdin (``argv``, ``cwd``, ``env``, ``stdout``,
``stderr``: the files the child writes), one JSON object a line on stdout (``code``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any


def _exit_code(code: object) -> int:
    """What ``sys.exit(code)`` makes the process's exit status (None is 0, a message 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(req: dict[str, Any]) -> None:
    code = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        from podium.cli.main import main

        try:
            code = _exit_code(main(req["argv"]))
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream: nothing left to write
                stream.flush()
        os._exit(code)


def serve() -> None:
    import podium.cli.main  # noqa: F401 - the imports every child shares, paid once

    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
