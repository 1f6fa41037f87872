"""The SQL of a run listing (``RunStore.list``), for the SQL stores: one builder, the
placeholder style a parameter (SQLite's ``?``, PostgreSQL's ``$1``, ``$2``, …), so the
two stores filter alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ("Placeholder", "dollar", "list_runs_sql", "qmark")

#: The marker of the ``n``-th parameter (counted from 1).
Placeholder = Callable[[int], str]


def qmark(n: int) -> str:
    """SQLite's (and DB-API's ``qmark``) placeholder: ``?`` whatever the position."""
    return "?"


def dollar(n: int) -> str:
    """PostgreSQL's (asyncpg's) numbered placeholder: ``$n``."""
    return f"${n}"


def list_runs_sql(
    table: str,
    placeholder: Placeholder,
    *,
    tenant: str | None,
    status: str | None,
    agent: str | None,
    since: float | None,
    until: float | None,
    now: float,
    limit: int,
) -> tuple[str, list[Any]]:
    """The statement selecting the ``record`` column of ``table``'s live runs matching
    every filter given, newest first, at most ``limit``; and its parameters in order.

    >>> list_runs_sql("runs", qmark, tenant="acme", status=None, agent=None, since=None,
    ...               until=None, now=5.0, limit=10)[1]
    ['acme', 5.0, 10]
    """
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return placeholder(len(params))

    clauses = [
        f"{column} = {bind(value)}"
        for column, value in (("tenant", tenant), ("status", status), ("agent", agent))
        if value is not None
    ]
    if since is not None:
        clauses.append(f"created_at >= {bind(since)}")
    if until is not None:
        clauses.append(f"created_at <= {bind(until)}")
    clauses.append(f"(expires_at IS NULL OR expires_at > {bind(now)})")
    where = " AND ".join(clauses)
    limit_at = bind(max(limit, 0))
    sql = f"SELECT record FROM {table} WHERE {where} ORDER BY created_at DESC LIMIT {limit_at}"
    return sql, params
