"""PostgreSQL addresses and failures, in Podium's words.

A ``postgresql://`` URL is checked for its form before anything connects; asyncpg's
errors become one line each: a wrong password, a missing role or database are
:class:`~podium.errors.ConfigError` (nothing will fix them by waiting), a server that is
down, restarting, full or that cut the connection is
:class:`~podium.errors.StoreUnavailableError` (answered 503 + Retry-After by a gateway,
retried by workers and by the store itself).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from podium.errors import ConfigError, PodiumError, StoreError, StoreUnavailableError

__all__ = (
    "POSTGRES_SCHEMES",
    "check_postgres_url",
    "is_outage",
    "is_postgres_url",
    "redact",
    "translate",
)

POSTGRES_SCHEMES = ("postgresql", "postgres")


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
