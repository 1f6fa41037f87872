"""``postgresql://`` stores from the command line, as a user meets them: the real ``podium``
in a subprocess against the machine's PostgreSQL (a database of each test's own) or a
private server with password authentication. Every mistake is one line, no traceback;
a schema of another version is refused with the command to run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.test_mistakes import assert_one_line_error, podium
from distributed.postgres_server import PostgresServer, postgres_binaries
from postgres_fixtures import postgres_skip_reason, run_sql, with_database

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


@pytest.fixture
def password_postgres() -> Iterator[PostgresServer]:
    """A private server that asks for a password over TCP (the machine's trusts anyone)."""
    if postgres_binaries() is None:
        pytest.skip("no initdb/pg_ctl installed")
    server = PostgresServer(password="s3cret")
    server.start()
    yield server
    server.stop()


def test_a_run_is_kept_and_listed(fresh_postgres: str, tmp_path: Path) -> None:
    done = podium("run", "react", "hello", "--store", fresh_postgres, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = podium("runs", "list", "--store", fresh_postgres, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [(r["agent"], r["status"]) for r in runs] == [("react", "completed")]
    shown = podium("runs", "show", runs[0]["run_id"], "--store", fresh_postgres, cwd=tmp_path)
    assert shown.returncode == 0 and "status=completed" in shown.stdout, shown.stderr


def _missing_database(url: str) -> str:
    return with_database(url, "podium_no_such_db")


@pytest.mark.parametrize("command", [
    ["run", "react", "hi", "--store"],
    ["runs", "list", "--store"],
    ["db", "upgrade", "--store"],
    ["serve", "--port", "0", "--store"],
    ["worker", "--burst", "--store"],  # (its queue: the machine's Redis, which answers)
])
@pytest.mark.parametrize(("make_url", "needle"), [
    (_missing_database, "database 'podium_no_such_db' does not exist"),
    (lambda url: url.replace("postgres@", "podium_nobody@"),
     "refused user 'podium_nobody'"),
    (lambda url: url.rsplit("/", 1)[0], "names no database"),
    (lambda url: "postgresql://postgres@127.0.0.1:5432:x/db", "is malformed"),
])
def test_a_bad_store_is_one_line(
    postgres_url: str, tmp_path: Path, command: list[str], make_url: object, needle: str
) -> None:
    url = make_url(postgres_url)  # type: ignore[operator]
    assert_one_line_error(podium(*command, url, cwd=tmp_path), needle)


def test_a_wrong_password_is_one_line(password_postgres: PostgresServer, tmp_path: Path) -> None:
    wrong = password_postgres.url.replace(":s3cret@", ":wrong@")
    for command in (["runs", "list", "--store"], ["run", "react", "hi", "--store"],
                    ["db", "upgrade", "--store"]):
        out = podium(*command, wrong, cwd=tmp_path)
        assert_one_line_error(out, "password authentication failed for user 'postgres'")
        assert "wrong" not in out.stderr  # the password is starred in what is printed
    ok = podium("run", "react", "hi", "--store", password_postgres.url, "-q", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_an_older_schema_is_refused_until_upgraded(fresh_postgres: str, tmp_path: Path) -> None:
    from podium.store.postgres_schema import MIGRATIONS, SCHEMA_VERSION

    # A database as the first release left it: version 1's tables only.
    run_sql(fresh_postgres, "CREATE TABLE podium_schema (version integer NOT NULL)",
            *MIGRATIONS[0], "INSERT INTO podium_schema VALUES (1)")
    for command in (["runs", "list", "--store"], ["run", "react", "hi", "--store"]):
        assert_one_line_error(podium(*command, fresh_postgres, cwd=tmp_path),
                              f"version 1, this Podium needs {SCHEMA_VERSION}: run `podium db "
                              "upgrade")
    status = podium("db", "status", "--store", fresh_postgres, cwd=tmp_path)
    assert "schema version 1" in status.stdout and "behind" in status.stdout, status
    upgraded = podium("db", "upgrade", "--store", fresh_postgres, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"from version 1 to {SCHEMA_VERSION}" in upgraded.stdout
    again = podium("db", "upgrade", "--store", fresh_postgres, cwd=tmp_path)
    assert "nothing to do" in again.stdout, again
    ok = podium("run", "react", "hi", "--store", fresh_postgres, "-q", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_a_newer_schema_is_refused(fresh_postgres: str, tmp_path: Path) -> None:
    from podium.store.postgres_schema import SCHEMA_VERSION

    made = podium("db", "upgrade", "--store", fresh_postgres, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    newer = SCHEMA_VERSION + 1
    run_sql(fresh_postgres, f"INSERT INTO podium_schema VALUES ({newer})")
    for command in (["runs", "list", "--store"], ["run", "react", "hi", "--store"],
                    ["db", "upgrade", "--store"], ["serve", "--port", "0", "--store"]):
        assert_one_line_error(podium(*command, fresh_postgres, cwd=tmp_path),
                              f"version {newer}, newer than this Podium's {SCHEMA_VERSION}")


def test_looking_never_creates_tables(fresh_postgres: str, tmp_path: Path) -> None:
    out = podium("runs", "list", "--store", fresh_postgres, cwd=tmp_path)
    assert_one_line_error(out, "no Podium tables: run `podium db upgrade")
    status = podium("db", "status", "--store", fresh_postgres, cwd=tmp_path)
    assert "no Podium tables" in status.stdout, status
