"""The run listing's SQL is built once for both SQL stores; only the placeholders differ."""

from __future__ import annotations

from podium.store.listing import dollar, list_runs_sql, qmark


def test_every_filter_in_order_with_either_placeholder_style() -> None:
    filters = {"tenant": "acme", "status": "completed", "agent": None, "since": 1.0,
               "until": 2.0, "now": 3.0, "limit": 10}
    sqlite_sql, sqlite_params = list_runs_sql("runs", qmark, **filters)  # type: ignore[arg-type]
    pg_sql, pg_params = list_runs_sql("podium_runs", dollar, **filters)  # type: ignore[arg-type]
    assert sqlite_params == pg_params == ["acme", "completed", 1.0, 2.0, 3.0, 10]
    assert sqlite_sql == (
        "SELECT record FROM runs WHERE tenant = ? AND status = ? AND created_at >= ? AND "
        "created_at <= ? AND (expires_at IS NULL OR expires_at > ?) "
        "ORDER BY created_at DESC LIMIT ?"
    )
    assert pg_sql == (
        "SELECT record FROM podium_runs WHERE tenant = $1 AND status = $2 AND "
        "created_at >= $3 AND created_at <= $4 AND (expires_at IS NULL OR expires_at > $5) "
        "ORDER BY created_at DESC LIMIT $6"
    )


def test_no_filter_lists_the_live_runs_and_a_negative_limit_none() -> None:
    sql, params = list_runs_sql("runs", qmark, tenant=None, status=None, agent=None,
                                since=None, until=None, now=3.0, limit=-5)
    assert sql.endswith("WHERE (expires_at IS NULL OR expires_at > ?) "
                        "ORDER BY created_at DESC LIMIT ?")
    assert params == [3.0, 0]
