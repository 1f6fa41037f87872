"""Which source wins, as docs/configuration.md says: a command-line option, then a
``PODIUM_*`` variable, then ``podium.toml``, then the default. Seen from outside: the
real ``podium serve`` is pointed at an address it cannot have, and the one line it
exits with names the host and port it tried; a store that is not SQLite is named the
same way. Nothing is served, so each run takes about a second."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cli.test_mistakes import assert_one_line_error, podium

pytestmark = pytest.mark.slow



def _foreign_hosts(n: int) -> list[str]:
    """``n`` documentation addresses (RFC 5737) this machine does not have: binding one
    fails at once. Some sandboxes do give themselves one (192.0.2.2), hence the check."""
    found = []
    for net in ("192.0.2", "198.51.100", "203.0.113"):
        for last in range(1, 9):
            host = f"{net}.{last}"
            with socket.socket() as s:
                try:
                    s.bind((host, 0))
                except OSError:
                    found.append(host)
            if len(found) == n:
                return found
    raise AssertionError("this machine has every documentation address")


FILE_HOST, ENV_HOST, CLI_HOST = _foreign_hosts(3)


@pytest.mark.parametrize(
    ("use_file", "variables", "options", "expected"),
    [
        (False, {}, ("--host", CLI_HOST), f"port 8000: cannot listen on {CLI_HOST}"),
        (True, {}, (), f"port 1111: cannot listen on {FILE_HOST}"),
        (
            True,
            {"PODIUM_SERVER__HOST": ENV_HOST, "PODIUM_SERVER__PORT": "2222"},
            (),
            f"port 2222: cannot listen on {ENV_HOST}",
        ),
        (
            True,
            {"PODIUM_SERVER__HOST": ENV_HOST, "PODIUM_SERVER__PORT": "2222"},
            ("--host", CLI_HOST, "--port", "3333"),
            f"port 3333: cannot listen on {CLI_HOST}",
        ),
        # Sources mix key by key: the option's host, the variable's port.
        (True, {"PODIUM_SERVER__PORT": "2222"}, ("--host", CLI_HOST),
         f"port 2222: cannot listen on {CLI_HOST}"),
    ],
    ids=["default", "file", "env-over-file", "option-over-env", "mixed"],
)
def test_host_and_port(
    use_file: bool, variables: dict[str, str], options: tuple[str, ...], expected: str,
    tmp_path: Path,
) -> None:
    # ./podium.toml, found without --config: the default place is a source like any other.
    if use_file:
        (tmp_path / "podium.toml").write_text(f'[server]\nhost = "{FILE_HOST}"\nport = 1111\n')
    out = podium("serve", "--agent", "react", *options, cwd=tmp_path, extra_env=variables)
    assert_one_line_error(out, expected)
    assert out.returncode == 2


def test_store(tmp_path: Path) -> None:
    """server.store from each source: the refused file is the one that won."""
    for name in ("file", "env", "cli"):
        (tmp_path / f"{name}.db").write_text("not a database\n")
    config = tmp_path / "podium.toml"
    config.write_text(f'[server]\nstore = "sqlite:{tmp_path / "file.db"}"\n')
    variables = {"PODIUM_SERVER__STORE": f"sqlite:{tmp_path / 'env.db'}"}
    base = ("serve", "--agent", "react", "--port", "0", "--config", str(config))
    for options, env, winner in [
        ((), {}, "file"),
        ((), variables, "env"),
        (("--store", f"sqlite:{tmp_path / 'cli.db'}"), variables, "cli"),
    ]:
        out = podium(*base, *options, cwd=tmp_path, extra_env=env)
        assert_one_line_error(out, f"store '{tmp_path / winner}.db' is not a SQLite database")
