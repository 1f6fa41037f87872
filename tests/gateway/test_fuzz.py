"""Property-based fuzz of the API from its own OpenAPI document (schemathesis).

Every generated request goes to a real ``podium serve`` process; no response
may be a 5xx, and every response must pass every schemathesis check: it matches
the document (status code, content type, headers, body schema), schema-valid
data is accepted, and it answers within the response-time limit (10 s).
Hypothesis drives schemathesis's strategies directly (one test per operation,
``max_examples`` each).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import max_response_time

from conftest import KEY_A, ServerProcess

pytestmark = pytest.mark.slow

OPERATIONS = [
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/{run_id}"),
    ("GET", "/v1/runs/{run_id}/events"),
    ("GET", "/v1/runs/{run_id}/children"),
    ("POST", "/v1/runs/{run_id}/cancel"),
    ("GET", "/v1/approvals"),
    ("GET", "/v1/runs/{run_id}/approvals"),
    ("POST", "/v1/runs/{run_id}/approvals/{call_id}"),
    ("POST", "/v1/threads"),
    ("GET", "/v1/threads"),
    ("GET", "/v1/threads/{thread_id}"),
    ("DELETE", "/v1/threads/{thread_id}"),
    ("GET", "/v1/agents"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/responses/{response_id}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]


@pytest.fixture(scope="session")
def api_schema(server: ServerProcess) -> Any:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    found = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_operation_conforms_to_the_document(
    api_schema: Any, server: ServerProcess, method: str, path: str
) -> None:
    operation = api_schema[path][method]
    responses: list[int] = []

    @given(case=operation.as_strategy())
    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def fuzz(case: Any) -> None:
        response = case.call_and_validate(
            base_url=server.url,
            headers={"Authorization": f"Bearer {KEY_A}"},
            timeout=30,
            additional_checks=[max_response_time],
        )
        responses.append(response.status_code)
        assert response.status_code < 500

    fuzz()
    assert responses
