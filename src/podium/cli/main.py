"""The ``podium`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``,
which adds its parser and sets ``handler`` (a function taking the parsed
namespace and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ("main",)

#: Modules under ``podium.cli`` that each register one subcommand.
COMMAND_MODULES: tuple[str, ...] = ("run", "bench", "serve", "worker", "sim_server", "runs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podium",
        description="Serve LLM agents at high concurrency on CPUs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"podium.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
