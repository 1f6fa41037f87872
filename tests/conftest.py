"""Shared fixtures: every async test runs on the default loop and on uvloop."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend
