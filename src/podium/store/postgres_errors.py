"""PostgreSQL addresses and failures, in Podium's words.

A ``postgresql://`` URL is checked for its form before anything connects (and its
``statement_timeout`` read: :func:`statement_timeout_s`); asyncpg's
errors become one line each: a wrong password, a missing role or database are
:class:`~podium.errors.ConfigError` (nothing will fix them by waiting), a server that is
down, restarting, full or that cut the connection is
:class:`~podium.errors.StoreUnavailableError` (answered 503 + Retry-After by a gateway,
retried by workers and by the store itself).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit, urlunsplit

from podium.errors import ConfigError, PodiumError, StoreError, StoreUnavailableError

__all__ = (
    "POSTGRES_SCHEMES",
    "check_postgres_url",
    "is_outage",
    "is_postgres_url",
    "redact",
    "statement_timeout_s",
    "translate",
)

POSTGRES_SCHEMES = ("postgresql", "postgres")
#: Every statement's bound on the server unless the URL or the caller says otherwise.
DEFAULT_STATEMENT_TIMEOUT_S = 30.0
#: PostgreSQL's own spelling of a time setting: milliseconds, or a number and its unit.
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h)?\s*")
_UNIT_S = {None: 0.001, "ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0}


def is_postgres_url(spec: str) -> bool:
    return spec.startswith(tuple(f"{s}://" for s in POSTGRES_SCHEMES))


def redact(url: str) -> str:
    """``url`` with its password starred: it goes into log lines and error messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "postgresql://…"  # too malformed to tell the password from the rest
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def check_postgres_url(url: str) -> None:
    """Refuse, at once, a URL asyncpg would misread: one :class:`ConfigError` line."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # parses it: "host:port5432" is caught here
    except ValueError as exc:
        raise ConfigError(f"PostgreSQL URL {redact(url)!r} is malformed: {exc}") from None
    if parts.scheme not in POSTGRES_SCHEMES:
        raise ConfigError(
            f"PostgreSQL URL {redact(url)!r}: use postgresql://USER[:PASSWORD]@HOST[:PORT]/DB"
        )
    if not parts.hostname and "host=" not in parts.query:
        raise ConfigError(
            f"PostgreSQL URL {redact(url)!r} names no host; use "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB"
        )
    if not parts.path.strip("/"):
        raise ConfigError(
            f"PostgreSQL URL {redact(url)!r} names no database; use "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB"
        )


def statement_timeout_s(url: str, given: float | None = None) -> float:
    """Every statement's bound, in seconds: ``given`` (the caller's), else the URL's
    ``?statement_timeout=`` in PostgreSQL's spelling (``5000``: ms; ``5s``, ``2min``),
    else 30 s. The URL's value must be set by Podium itself (asyncpg would pass it on as
    a setting, which Podium's own would override), and it must bound: 0 (PostgreSQL's
    "never") is refused, as a hung statement would then hang its caller for good."""
    if given is not None:
        if given <= 0:
            raise ConfigError(f"statement_timeout_s must be positive, got {given}")
        return given
    values = parse_qs(urlsplit(url).query).get("statement_timeout")
    if not values:
        return DEFAULT_STATEMENT_TIMEOUT_S
    match = _DURATION.fullmatch(values[-1])
    seconds = float(match[1]) * _UNIT_S[match[2]] if match else 0.0
    if seconds <= 0:
        raise ConfigError(
            f"PostgreSQL URL {redact(url)!r}: statement_timeout={values[-1]!r}: give a "
            "positive time (5000 for milliseconds, 5s, 2min)")
    return seconds


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the server is away or out of a resource for now (worth waiting
    for and retrying), not that the statement or the settings are wrong."""
    import asyncpg

    return isinstance(
        exc,
        OSError  # refused, reset, unreachable (ConnectionError is one)
        | TimeoutError
        | asyncpg.PostgresConnectionError  # class 08: the connection failed or is gone
        | asyncpg.OperatorInterventionError  # 57: shut down, terminated, statement_timeout
        | asyncpg.InsufficientResourcesError  # 53: disk full, out of memory, too many clients
        | asyncpg.InterfaceError  # the client's side of a connection that died under it
        # (a connection cut mid-statement can leave asyncpg's protocol in a state it then
        # refuses to use: that connection is dropped, the call goes on with another)
        | asyncpg.InternalClientError,
    ) and not isinstance(exc, asyncpg.InvalidCatalogNameError)


def _what(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


def translate(exc: BaseException, url: str) -> PodiumError:
    """Podium's error for a failure to connect to or talk with the server at ``url``."""
    import asyncpg

    where = redact(url)
    parts = urlsplit(url)
    user = parts.username or "(default user)"
    database = parts.path.strip("/") or "(default database)"
    if isinstance(exc, asyncpg.InvalidPasswordError):
        return ConfigError(f"{where}: password authentication failed for user {user!r}")
    if isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        return ConfigError(f"{where}: the server refused user {user!r}: {_what(exc)}")
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return ConfigError(
            f"{where}: database {database!r} does not exist (create it: createdb {database})"
        )
    if isinstance(exc, asyncpg.CannotConnectNowError):
        return StoreUnavailableError(f"{where}: the server is starting or stopping ({_what(exc)})")
    if isinstance(exc, asyncpg.DiskFullError):
        return StoreUnavailableError(
            f"{where}: the server's disk is full ({_what(exc)}); nothing of this write was stored"
        )
    if isinstance(exc, asyncpg.QueryCanceledError):
        return StoreUnavailableError(f"{where}: a statement ran past its timeout ({_what(exc)})")
    if isinstance(exc, ConnectionRefusedError):
        return StoreUnavailableError(f"{where}: cannot reach PostgreSQL (connection refused)")
    if isinstance(exc, TimeoutError):
        return StoreUnavailableError(f"{where}: PostgreSQL did not answer in time")
    if is_outage(exc):
        return StoreUnavailableError(f"{where}: lost PostgreSQL: {_what(exc)}")
    return StoreError(f"{where}: {_what(exc)}")
