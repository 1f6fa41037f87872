"""Fixtures of the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.cli.test_mistakes import Forked


@pytest.fixture(scope="module")
def forked() -> Iterator[Forked]:
    """A fork server (:mod:`tests.cli.forkserver`) for the module's ``podium`` commands."""
    server = Forked()
    try:
        yield server
    finally:
        server.close()
