"""What every subcommand shares: the argument parser, one-line errors, and early checks.

A user's mistake is answered with one line on stderr and a non-zero exit,
never a traceback: :class:`UserError` (and :class:`~podium.errors.PodiumError`)
raised anywhere in a handler is printed by :func:`podium.cli.main.main` as
``podium COMMAND: error: MESSAGE``. The checks here run before anything is
opened, so a wrong store file or Redis URL fails at once instead of hanging
in a background thread or a reconnect loop.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from podium._config_checks import check_redis_url  # the file's check, for the options too
from podium.errors import ConfigError

__all__ = (
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "LISTEN_BACKLOG",
    "HelpFormatter",
    "Parser",
    "RawHelpFormatter",
    "UserError",
    "bind_listeners",
    "check_output_file",
    "check_redis_url",
    "check_sqlite_path",
    "host_port",
    "local_store",
    "log_level",
    "missing_extra",
    "non_empty",
    "port_number",
    "positive_int",
    "run_store",
    "seconds",
    "write_output_file",
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
LISTEN_BACKLOG = 2048  # uvicorn's default

#: Optional dependencies, by the module a missing extra leaves out.
EXTRAS: dict[str, str] = {"redis": "redis", "hiredis": "redis", "tokenizers": "hf",
                           "asyncpg": "postgres"}


class UserError(ConfigError):
    """A mistake on the command line or in the set-up: printed as one line, exit 2."""


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` shows each option's default (when it has a meaningful one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text  # the help says it in its own words
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class RawHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, and the description and epilog kept as written (examples)."""


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands that refuse what they do not know themselves.

    argparse hands a subcommand's unknown arguments back to the top parser, which said
    ``podium: error: unrecognized arguments: --bogus (see podium --help)`` for
    ``podium run react hi --bogus``: the wrong command and the wrong help. Here the
    subcommand that was chosen (the innermost, for ``podium runs list``) says it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        extras = getattr(namespace, argparse._UNRECOGNIZED_ARGS_ATTR, None)
        if extras and values:
            chosen: argparse.ArgumentParser = self.choices[values[0]]
            chosen.error(f"unrecognized arguments: {' '.join(extras)}")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit 2), said by
    the subcommand they belong to."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.register("action", "parsers", _Subcommands)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _whole(value: str, least: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < least:
        bound = "at least 1" if least == 1 else f"{least} or more"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {n}")
    return n


def positive_int(value: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _whole(value, 1)


def count(value: str) -> int:
    """An argparse type: a whole number, 0 or more (tokens, steps)."""
    return _whole(value, 0)


def _finite(value: str, noun: str, above_zero: bool) -> float:
    # ``nan`` and ``inf``, which float() reads, are refused: a NaN TTL crashed a store.
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {noun}, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (above_zero and x == 0):
        bound = "above 0" if above_zero else "0 or more"
        raise argparse.ArgumentTypeError(f"must be a finite number, {bound}, got {value}")
    return x


def amount(value: str) -> float:
    """An argparse type: a finite number, 0 or more (milliseconds, microseconds)."""
    return _finite(value, "a number", above_zero=False)


def positive_seconds(value: str) -> float:
    """An argparse type: a finite number of seconds above 0 (a lease, a patience)."""
    return _finite(value, "a number of seconds", above_zero=True)


def non_empty(value: str) -> str:
    """An argparse type: a string with something in it. ``--config ""`` or ``--prefix ""``
    (an unset shell variable) would otherwise fall back to the default without a word."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def local_store(value: str) -> str:
    """An argparse type: ``memory``, or a SQLite file as ``PATH`` or ``sqlite:PATH`` (the
    spelling ``podium serve`` and ``podium runs`` take; it made a file named
    ``sqlite:PATH`` here). A URL, or ``memory:`` with something after it, is refused: it
    would be a file of that name."""
    value = non_empty(value)
    if value == "memory":
        return value
    if value.startswith("sqlite:"):
        return non_empty(value.removeprefix("sqlite:"))
    if "://" in value or value.startswith("memory:"):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give memory, or a SQLite file as PATH or sqlite:PATH"
        )
    return value


def run_store(value: str) -> str:
    """An argparse type: what :func:`local_store` takes, or a ``postgresql://`` URL (checked
    for its form here; ``podium run`` keeps the run there)."""
    from podium.store.postgres_errors import check_postgres_url, is_postgres_url

    if is_postgres_url(value):
        try:
            check_postgres_url(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    try:
        return local_store(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give memory, a SQLite file as PATH or sqlite:PATH, or a "
            "postgresql:// URL"
        ) from None


def seconds(value: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more (``nan`` and ``inf``, which
    ``float`` reads, are refused: a NaN TTL crashed the Redis store at start)."""
    return _finite(value, "a number of seconds", above_zero=False)


def port_number(value: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535. Out of range, uvicorn
    would announce the server and hang, and a bind would raise a traceback."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 (any free one) to 65535, got {n}")
    return n


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as a URL writes it: an IPv6 literal in brackets.

    >>> host_port("::1", 8000)
    '[::1]:8000'
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cannot_listen(what: str, port: int, host: str, exc: OSError) -> UserError:
    return UserError(f"{what} {port}: cannot listen on {host}: {exc.strerror or exc}")


def bind_listeners(host: str, port: int, what: str = "port") -> list[socket.socket]:
    """TCP sockets bound to every address ``host`` resolves to, all on one port: the
    one given, or with ``port`` 0 the one the OS picked for the first (read it with
    ``sockets[0].getsockname()[1]``). Not listening yet: call ``listen`` when connections
    should queue. A port taken, a host that is not this machine's or does not resolve is
    a :class:`UserError` (``port 80: cannot listen on HOST: reason``).

    The options are the ones the event loop's ``create_server`` sets when a server binds
    its own (SO_REUSEADDR, IPv6 sockets IPv6-only so ``localhost`` can take both
    families), and the sockets are not inherited by the processes the server starts.
    """
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:  # socket.gaierror: a host that does not resolve
        raise _cannot_listen(what, port, host, exc) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # in order, once each
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.set_inheritable(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # one URL reaches every address
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _cannot_listen(what, port, host, exc) from None
    return sockets


_LEVELS = ("debug", "info", "warning", "error", "critical")


def log_level(value: str) -> str:
    """An argparse type: a logging level name, any case; returned in upper case."""
    if value.lower() not in _LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {value!r}; use one of: {', '.join(_LEVELS)}"
        )
    return value.upper()


def check_output_file(path: str, option: str) -> None:
    """Refuse, before any work, a file a command writes only at its end (a report): a
    load test of minutes must not end in a traceback about a directory that is not
    there."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {path!r} is a directory, not a file")
    parent = p.parent
    if not parent.is_dir():
        raise UserError(f"{option} {path!r}: directory {str(parent)!r} does not exist")
    if not os.access(parent if not p.exists() else p, os.W_OK):
        raise UserError(f"{option} {path!r}: permission denied")


def write_output_file(path: str, option: str, text: str) -> None:
    """Write what :func:`check_output_file` allowed; a failure since (a full disk, the
    directory removed) is one line, not a traceback."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{option} {path!r}: {exc.strerror or exc}") from None


def check_sqlite_path(path: str) -> None:
    """Refuse, at once, a store path that cannot be a SQLite database.

    A missing file is fine (it is created); an existing one must be empty or
    start with SQLite's header. Opening anything else would fail inside the
    store's database thread, far from the user's mistake. The commands that call
    this write the store, so a file (or directory) they may not write is refused too:
    a server on it would fail at start-up with SQLite's "unable to open database file".
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"store {path!r} is a directory, not a SQLite file")
    if not p.exists():
        if not p.parent.exists():
            raise UserError(f"store {path!r}: directory {str(p.parent)!r} does not exist")
        if not p.parent.is_dir():
            raise UserError(f"store {path!r}: {str(p.parent)!r} is a file, not a directory")
        _check_writable(path)
        return
    try:
        with p.open("rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise UserError(f"store {path!r}: {exc.strerror or exc}") from None
    if head and head != b"SQLite format 3\x00":
        raise UserError(f"store {path!r} is not a SQLite database")
    _check_writable(path)


def _check_writable(path: str) -> None:
    from podium.store.sqlite import read_only_reason  # loaded by the commands that get here

    why = read_only_reason(path)
    if why is not None:
        raise UserError(f"store {path!r} is read-only: {why}")


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The install hint for an optional dependency that is not installed, if it is one."""
    root = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    return (
        f"this needs the {extra!r} extra ({root} is not installed): "
        f"pip install 'podium[{extra}]'"
    )


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
