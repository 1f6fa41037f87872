"""Bad input is a 4xx with the error shape, never a 500 (issue 8, item 7), and retries with an
``Idempotency-Key`` make one run (item 5), in-process."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from conftest import KEY_B, gateway_client

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}
DEEP = "[" * 2000 + "]" * 2000  # 4 KB


def _error(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, r.text
    error: dict[str, str] = r.json()["error"]
    assert error["type"] and error["message"]
    return error


@pytest.mark.parametrize(
    "message",
    [
        '{"role": "assistant", "tool_calls": [{"id": "c", "function": ' + DEEP + "}]}",
        '{"role": "user", "content": [{"type": "text", "text": "hi", "x": ' + DEEP + "}]}",
    ],
)
async def test_deeply_nested_json_is_a_400(message: str) -> None:
    async with gateway_client() as (_, client):
        body = '{"model": "react", "messages": [' + message + "]}"
        r = await client.post(
            "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
        )
        assert _error(r, 400)["type"] == "invalid_json"


async def test_a_limit_of_thousands_of_digits_is_a_422() -> None:
    async with gateway_client() as (_, client):
        r = await client.get("/v1/runs", params={"limit": "9" * 5000})
        assert _error(r, 422)["field"] == "limit"
        r = await client.get("/v1/runs", params={"limit": "0" * 5000 + "5"})
        assert r.status_code == 200


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/threads"])
@pytest.mark.parametrize("limit", ["²", "\uff11", "\u0661"])  # digits to isdigit(), not to int()
async def test_a_limit_in_other_digits_is_a_422(path: str, limit: str) -> None:
    async with gateway_client() as (_, client):
        assert _error(await client.get(path, params={"limit": limit}), 422)["field"] == "limit"


@pytest.mark.parametrize(
    "after", [str(2**63), str(2**64 + 5), "-2", "1e3", "x", "9" * 5000, "²", "-²", "\uff11"]
)
async def test_after_out_of_range_or_not_a_number_is_a_422(after: str) -> None:
    async with gateway_client() as (_, client):
        run = (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()
        r = await client.get(f"/v1/runs/{run['id']}/events", params={"after": after})
        assert _error(r, 422)["field"] == "after"


@pytest.mark.parametrize("last", [str(2**63), str(2**53)])
async def test_last_event_id_out_of_range_is_a_422(last: str) -> None:
    async with gateway_client() as (_, client):
        run = (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()
        r = await client.get(f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": last})
        assert _error(r, 422)["field"] == "last-event-id"


async def test_resuming_past_the_end_of_an_ended_run_sends_no_second_final() -> None:
    async with gateway_client() as (gw, client):
        run = (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()
        await gw.wait(run["id"], 10)
        r = await client.get(f"/v1/runs/{run['id']}/events", params={"after": 2**53 - 1})
        assert r.status_code == 200 and "event: final" not in r.text


async def test_an_idempotency_key_makes_one_run_per_tenant() -> None:
    async with gateway_client() as (_, client):
        key = {"Idempotency-Key": "order-7"}
        body = {"agent": "react", "input": "q", "metadata": {"k": "v"}}
        first = await client.post("/v1/runs", json=body, headers=key)
        again = await client.post("/v1/runs", json={**body, "wait": True}, headers=key)
        assert first.status_code == 202 and again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        assert "idempotent-replayed" not in first.headers
        changed = await client.post("/v1/runs", json={**body, "input": "other"}, headers=key)
        assert _error(changed, 422)["type"] == "idempotency_mismatch"
        other_tenant = await client.post(
            "/v1/runs", json=body, headers={**key, "Authorization": f"Bearer {KEY_B}"}
        )
        assert other_tenant.status_code == 202
        assert other_tenant.json()["id"] != first.json()["id"]
        listed = (await client.get("/v1/runs")).json()["data"]
        assert [r["id"] for r in listed] == [first.json()["id"]]


async def test_concurrent_retries_with_one_key_make_one_run() -> None:
    async with gateway_client() as (_, client):
        key = {"Idempotency-Key": "burst"}
        replies = await asyncio.gather(
            *(
                client.post("/v1/runs", json={"agent": "react", "input": "q"}, headers=key)
                for _ in range(8)
            )
        )
        assert {r.status_code for r in replies} <= {200, 202}
        assert len({r.json()["id"] for r in replies}) == 1


async def test_chat_completions_take_an_idempotency_key() -> None:
    async with gateway_client() as (_, client):
        body = {"model": "react", "messages": [{"role": "user", "content": "q"}]}
        key = {"Idempotency-Key": "chat-1"}
        first = await client.post("/v1/chat/completions", json=body, headers=key)
        again = await client.post("/v1/chat/completions", json=body, headers=key)
        assert first.status_code == again.status_code == 200
        assert first.headers["x-podium-run-id"] == again.headers["x-podium-run-id"]
        assert first.json()["id"] == again.json()["id"]


@pytest.mark.parametrize("key", [b"", b"x" * 256, "caf\u00e9".encode(), b"a\x7fb"])
async def test_a_bad_idempotency_key_is_a_422(key: bytes) -> None:
    async with gateway_client() as (_, client):
        r = await client.post(
            "/v1/runs",
            json={"agent": "react", "input": "q"},
            headers={"Idempotency-Key": key},
        )
        assert _error(r, 422)["field"] == "idempotency-key"


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/runs/"), ("POST", "/v1/runs/"),
                                              ("GET", "/healthz/")])
async def test_a_trailing_slash_is_a_404_not_a_redirect_to_the_host_header(
    method: str, path: str
) -> None:
    async with gateway_client() as (_, client):
        r = await client.request(method, path, headers={"Host": "evil.example"})
        assert _error(r, 404)["type"] == "not_found"
        assert "location" not in r.headers


_CHAT = b'{"model": "react", "messages": [{"role": "user", "content": "q"}], '


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", "1e30"),  # a float where a count goes
        ("max_tokens", "1" + "0" * 30),  # 10**30, an int
        ("max_tokens", "18446744073709551615"),
        ("max_tokens", "-1"),
        ("max_tokens", "0"),
        ("max_completion_tokens", "1" + "0" * 30),
        ("temperature", "1e30"),
        ("temperature", "-0.5"),
        ("temperature", "1e400"),  # inf to a parser that allows it
        ("top_p", "1.5"),
        ("top_p", "-1e400"),
        ("presence_penalty", "1e30"),
        ("frequency_penalty", "-3"),
        ("seed", "9" * 30),
        ("n", "2"),
    ],
)
async def test_a_numeric_option_out_of_range_is_a_422_naming_it(field: str, value: str) -> None:
    async with gateway_client() as (gw, client):
        body = _CHAT + f'"{field}": {value}}}'.encode()
        r = await client.post("/v1/chat/completions", content=body, headers=JSON)
        assert _error(r, 422)["field"] == field
        assert await gw.store.list() == []


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "nan"])
async def test_nan_and_infinity_are_not_json(value: str) -> None:
    async with gateway_client() as (gw, client):
        for path, body in [
            ("/v1/chat/completions", _CHAT + f'"temperature": {value}}}'.encode()),
            ("/v1/runs", f'{{"agent": "react", "input": "q", "wait_timeout_s": {value}}}'.encode()),
            ("/v1/threads", f'{{"ttl_s": {value}}}'.encode()),
        ]:
            r = await client.post(path, content=body, headers=JSON)
            assert _error(r, 400)["type"] == "invalid_json", path
        assert await gw.store.list() == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/runs", {"agent": "react", "input": "q", "wait_timeout_s": 1e30}, "wait_timeout_s"),
        ("/v1/runs", {"agent": "react", "input": "q", "wait_timeout_s": -1}, "wait_timeout_s"),
        ("/v1/runs", {"agent": "react", "input": "q", "wait_timeout_s": 0}, "wait_timeout_s"),
        ("/v1/threads", {"ttl_s": 1e30}, "ttl_s"),
        ("/v1/threads", {"ttl_s": -5}, "ttl_s"),
    ],
)
async def test_a_timeout_out_of_range_is_a_422_naming_it(
    path: str, body: dict[str, object], field: str
) -> None:
    async with gateway_client() as (gw, client):
        assert _error(await client.post(path, json=body), 422)["field"] == field
        assert await gw.store.list() == []


async def test_sampling_options_in_range_are_accepted() -> None:
    async with gateway_client() as (_, client):
        body = _CHAT + (
            b'"max_tokens": 16777216, "max_completion_tokens": 1, "temperature": 2, '
            b'"top_p": 0, "presence_penalty": -2, "frequency_penalty": 2, '
            b'"seed": -9223372036854775808, "n": 1}'
        )
        r = await client.post("/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == 200, r.text
