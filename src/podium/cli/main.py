"""The ``podium`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``,
which adds its parser and sets ``handler`` (a function taking the parsed
namespace and returning an exit code). Errors a user can make come back as
one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from podium._version import __version__
from podium.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, Parser, missing_extra
from podium.errors import PodiumError

__all__ = ("main",)

#: Modules under ``podium.cli`` that each register one subcommand.
COMMAND_MODULES: tuple[str, ...] = (
    "run", "bench", "serve", "worker", "sim_server", "runs", "db", "plan",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="podium",
        description="Serve LLM agents at high concurrency on CPUs.",
    )
    parser.add_argument("--version", action="version", version=f"podium {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(f"podium.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = f"podium {args.command}"
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except PodiumError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"{prog}: error: {hint}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
