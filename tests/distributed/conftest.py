"""Tests against a real Redis: ``shared_redis_url``, ``prefix`` and ``private_redis``
come from the root conftest (:mod:`redis_fixtures`); without redis-py these are skipped."""

from __future__ import annotations

import pytest

pytest.importorskip("redis")
