"""Every endpoint in-process (httpx ASGI transport): runs, events, cancel, agents, errors."""

from __future__ import annotations

import asyncio
import math

import httpx
import msgspec
import pytest

from conftest import KEY_ADMIN, KEY_B, gateway_client

pytestmark = pytest.mark.anyio


def parse_sse(text: str) -> list[dict[str, object]]:
    events = []
    for block in text.strip().split("\n\n"):
        event: dict[str, object] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            event[name] = msgspec.json.decode(value) if name == "data" else value
        if event:
            events.append(event)
    return events


async def test_create_returns_202_then_get_shows_the_finished_run() -> None:
    async with gateway_client() as (gw, client):
        r = await client.post("/v1/runs", json={"agent": "react", "input": "find podium"})
        assert r.status_code == 202
        run = r.json()
        assert run["status"] == "queued" and r.headers["location"] == f"/v1/runs/{run['id']}"
        await gw.wait(run["id"], 10)
        r = await client.get(f"/v1/runs/{run['id']}")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "completed" and body["output"] == "42."
        assert body["steps"] == 3 and body["usage"]["requests"] == 3
        profile = body["profile"]
        assert set(profile["phases"]) == {
            "admit",
            "assemble",
            "model",
            "parse",
            "tools",
            "merge",
            "checkpoint",
        }
        assert len(profile["steps"]) == 3 and profile["wall_ms"] > 0


async def test_wait_returns_the_result() -> None:
    async with gateway_client() as (_, client):
        r = await client.post(
            "/v1/runs",
            json={"agent": "slow", "input": "q", "wait": True, "metadata": {"ticket": "T-1"}},
        )
        assert r.status_code == 200
        assert r.json()["output"] == "slow answer" and r.json()["metadata"] == {"ticket": "T-1"}


async def test_wait_timeout_answers_202_with_the_status_so_far() -> None:
    async with gateway_client() as (_, client):
        r = await client.post(
            "/v1/runs", json={"agent": "sleepy", "input": "q", "wait": True, "wait_timeout_s": 0.05}
        )
        assert r.status_code == 202 and r.json()["status"] in {"queued", "running"}


async def test_stream_sends_one_event_per_journal_entry_ending_with_final() -> None:
    async with gateway_client() as (_, client):
        r = await client.post("/v1/runs", json={"agent": "react", "input": "q", "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.text)
        # A step journaled whole is one entry sent as a group of events; the group's last
        # event carries the entry's id, so ids are the journal's sequence numbers in order.
        ids = [e["id"] for e in events if "id" in e]
        assert ids == [str(i) for i in range(len(ids))]
        names = [e["event"] for e in events]
        assert names[:3] == ["model_reply", "tool_result", "step_finished"]
        assert "id" not in events[0] and events[2]["id"] == "0"
        assert names[-1] == "final" and names.count("step_finished") == 3
        final = events[-1]["data"]
        assert isinstance(final, dict) and final["status"] == "completed"


async def test_events_resume_after_last_event_id() -> None:
    async with gateway_client() as (gw, client):
        run = (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()
        await gw.wait(run["id"], 10)
        full = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
        resumed = parse_sse(
            (await client.get(f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": "1"})).text
        )
        cut = next(i for i, e in enumerate(full) if e.get("id") == "1")
        assert resumed == full[cut + 1 :]
        assert resumed[0]["event"] == "model_reply"  # the next step, whole
        after_final = await client.get(
            f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": full[-1]["id"]}
        )
        assert after_final.status_code == 200 and parse_sse(after_final.text) == []


async def test_events_follow_a_live_run() -> None:
    async with gateway_client() as (_, client):
        run = (await client.post("/v1/runs", json={"agent": "slow", "input": "q"})).json()
        async with client.stream("GET", f"/v1/runs/{run['id']}/events") as r:
            names = [line[7:] async for line in r.aiter_lines() if line.startswith("event: ")]
        # A client listens: the model's tokens come as deltas before each step's reply.
        assert names[0] == "delta" and names[-1] == "final"
        journal = [n for n in names if n != "delta"]
        assert journal[0] == "model_reply"


async def test_cancel_a_running_run_and_a_finished_one() -> None:
    async with gateway_client() as (gw, client):
        run = (await client.post("/v1/runs", json={"agent": "sleepy", "input": "q"})).json()
        # The store signals journal appends only, not status changes: give the worker loop
        # turns until it has claimed the run.
        while (await gw.store.get(run["id"])).status != "running":  # type: ignore[union-attr]  # noqa: ASYNC110
            await asyncio.sleep(0)
        r = await client.post(f"/v1/runs/{run['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        events = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
        assert events[-1]["event"] == "final"
        again = await client.post(f"/v1/runs/{run['id']}/cancel")
        assert again.status_code == 409 and again.json()["error"]["type"] == "conflict"


async def test_cancel_a_queued_run() -> None:
    env = {"PODIUM_POOLS__DEFAULT__WORKERS": "0"}  # nobody claims: the run stays queued
    async with gateway_client(env) as (_, client):
        run = (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()
        r = await client.post(f"/v1/runs/{run['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        events = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
        assert [e["event"] for e in events] == ["final"]


async def test_list_filters_by_status_and_agent() -> None:
    async with gateway_client() as (_, client):
        for agent in ("react", "react", "slow"):
            await client.post("/v1/runs", json={"agent": agent, "input": "q", "wait": True})
        assert len((await client.get("/v1/runs")).json()["data"]) == 3
        r = await client.get("/v1/runs", params={"agent": "slow", "status": "completed"})
        assert [x["agent"] for x in r.json()["data"]] == ["slow"]
        assert len((await client.get("/v1/runs", params={"limit": 1})).json()["data"]) == 1
        bad = await client.get("/v1/runs", params={"status": "done"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "status"


async def test_list_within_a_time_window() -> None:
    async with gateway_client() as (_, client):
        made = [(await client.post("/v1/runs", json={"agent": "react", "input": "q",
                                                      "wait": True})).json()
                for _ in range(3)]
        first, second, third = (run["created_at"] for run in made)
        assert first <= second <= third

        async def ids(**params: object) -> list[str]:
            r = await client.get("/v1/runs", params=params)
            assert r.status_code == 200, r.text
            return [x["id"] for x in r.json()["data"]]

        everything = await ids()
        # Bounds rounded down, so the first run is inside: a whole second and a decimal one.
        assert await ids(since=str(math.floor(first))) == everything
        assert await ids(since=f"{first - 0.0005:.3f}") == everything
        assert set(await ids(since=repr(second))) == {made[1]["id"], made[2]["id"]}
        assert set(await ids(until=repr(first))) == {made[0]["id"]}
        assert await ids(since=f"{third + 60:.0f}") == []
        assert await ids(since=repr(third), until=repr(first)) == ([] if first < third else
                                                                  [made[0]["id"]])
        for bad in ("yesterday", "-1", "1e9", "nan", "1.", "9" * 13, ""):
            r = await client.get("/v1/runs", params={"since": bad})
            assert r.status_code == 422 and r.json()["error"]["field"] == "since", bad


async def test_agents_lists_tools_with_schemas() -> None:
    async with gateway_client() as (_, client):
        data = (await client.get("/v1/agents")).json()["data"]
        react = next(a for a in data if a["name"] == "react")
        assert react["tools"][0]["name"] == "lookup"
        assert react["tools"][0]["parameters"]["required"] == ["query"]


async def test_tenants_see_only_their_own_runs() -> None:
    async with gateway_client() as (_, client):
        run = (
            await client.post("/v1/runs", json={"agent": "react", "input": "secret", "wait": True})
        ).json()
        other = {"Authorization": f"Bearer {KEY_B}"}
        missing = await client.get("/v1/runs/run_does_not_exist", headers=other)
        foreign = await client.get(f"/v1/runs/{run['id']}", headers=other)
        assert foreign.status_code == missing.status_code == 404
        assert "secret" not in foreign.text
        for path in (f"/v1/runs/{run['id']}/events", f"/v1/runs/{run['id']}/cancel"):
            method = "POST" if path.endswith("cancel") else "GET"
            assert (await client.request(method, path, headers=other)).status_code == 404
        assert (await client.get("/v1/runs", headers=other)).json()["data"] == []
        assert (await client.get(f"/v1/runs/{run['id']}")).json()["input"] == "secret"


async def test_no_key_no_access_except_health() -> None:
    async with gateway_client() as (_, client):
        anonymous = httpx.Headers({"Authorization": ""})
        for method, path in [
            ("GET", "/v1/runs"),
            ("GET", "/v1/agents"),
            ("GET", "/metrics"),
            ("POST", "/v1/runs"),
            ("GET", "/v1/runs/x"),
        ]:
            r = await client.request(method, path, headers=anonymous)
            assert r.status_code == 401, path
            assert r.json()["error"]["type"] == "unauthorized"
        wrong = await client.get("/v1/runs", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert (await client.get("/healthz", headers=anonymous)).status_code == 200
        assert (await client.get("/readyz", headers=anonymous)).json()["status"] == "ready"
        assert (await client.get("/v1/runs", headers={"X-API-Key": KEY_B})).status_code == 200


@pytest.mark.parametrize(
    ("content", "headers", "status", "type", "field"),
    [
        (b'{"agent": "react", "input": "q", "colour": 1}', {}, 422, "invalid_request", "colour"),
        (b'{"agent": "react", "input": 7}', {}, 422, "invalid_request", "input"),
        (b'{"input": "q"}', {}, 422, "invalid_request", "agent"),
        (
            b'{"agent": "react", "input": "q", "wait_timeout_s": -1}',
            {},
            422,
            "invalid_request",
            "wait_timeout_s",
        ),
        (
            b'{"agent": "react", "input": "q", "metadata": {"a": 1}}',
            {},
            422,
            "invalid_request",
            "metadata[...]",
        ),
        (b'{"agent": "react", "input": ', {}, 400, "invalid_json", None),
        (b'{"agent": "nobody", "input": "q"}', {}, 404, "not_found", "agent"),
        (
            b"agent=react",
            {"content-type": "application/x-www-form-urlencoded"},
            415,
            "unsupported_media_type",
            "content-type",
        ),
        (
            b'{"agent": "react", "input": "' + b"x" * 2000 + b'"}',
            {},
            413,
            "payload_too_large",
            None,
        ),
    ],
)
async def test_bad_input_is_a_clear_error_and_changes_nothing(
    content: bytes, headers: dict[str, str], status: int, type: str, field: str | None
) -> None:
    async with gateway_client({"PODIUM_SERVER__MAX_BODY_BYTES": "1000"}) as (gw, client):
        r = await client.post(
            "/v1/runs", content=content, headers={"content-type": "application/json", **headers}
        )
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["type"] == type and error.get("field") == field and error["message"]
        assert await gw.store.list() == []


async def test_unknown_routes_and_methods_use_the_error_shape() -> None:
    async with gateway_client() as (_, client):
        r = await client.get("/v2/nothing")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
        r = await client.delete("/v1/runs")
        assert r.status_code == 405 and {"GET", "POST"} <= set(r.headers["allow"].split(", "))


async def test_metrics_export_requests_admission_and_queues() -> None:
    async with gateway_client() as (_, client):
        await client.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
        admin = {"Authorization": f"Bearer {KEY_ADMIN}"}
        text = (await client.get("/metrics", headers=admin)).text
        assert 'podium_http_requests_total{method="POST",route="/v1/runs",status="200"} 1.0' in text
        for name in (
            "podium_admission_limit",
            "podium_runs_admitted_total",
            "podium_event_loop_lag_p99_seconds",
            "podium_queue_waiting",
            "podium_process_cpu_utilization",
            "podium_event_loop_cpu_demand",
            "podium_run_duration_seconds_count",
        ):
            assert name in text


async def test_metrics_are_for_operators_only() -> None:
    async with gateway_client() as (_, client):
        r = await client.get("/metrics")  # a tenant's key: the numbers are every tenant's
        assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
        r = await client.get("/metrics", headers={"Authorization": ""})
        assert r.status_code == 401
        r = await client.get("/metrics", headers={"Authorization": f"Bearer {KEY_ADMIN}"})
        assert r.status_code == 200 and "podium_http_requests_total" in r.text


async def test_run_ids_are_random_not_counted() -> None:
    async with gateway_client() as (_, client):
        ids = [
            (await client.post("/v1/runs", json={"agent": "react", "input": "q"})).json()["id"]
            for _ in range(20)
        ]
        hexes = [i.removeprefix("run_") for i in ids]
        assert all(len(h) == 32 and int(h, 16) >= 0 for h in hexes)  # 128 bits
        # Counted ids share a long prefix and differ in their last digits; random ones
        # have no common prefix to speak of.
        assert len({h[:8] for h in hexes}) == len(hexes)


async def test_openapi_document_is_not_served_with_docs_off() -> None:
    async with gateway_client({"PODIUM_SERVER__DOCS": "false"}) as (_, client):
        assert (await client.get("/openapi.json")).status_code == 404


async def test_openapi_document_is_served() -> None:
    async with gateway_client() as (_, client):
        spec = (await client.get("/openapi.json", headers={"Authorization": ""})).json()
        assert spec["openapi"].startswith("3.1")
        assert {
            "/v1/runs",
            "/v1/runs/{run_id}",
            "/v1/runs/{run_id}/events",
            "/v1/runs/{run_id}/cancel",
            "/v1/agents",
            "/v1/threads",
            "/v1/threads/{thread_id}",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/responses/{response_id}",
            "/healthz",
            "/readyz",
            "/metrics",
        } <= set(spec["paths"])


async def test_a_running_run_reads_with_its_steps_and_tokens_so_far() -> None:
    """GET /v1/runs/{id} of a running run said 0 steps and 0 tokens (its record has them
    at its end; found from the outside)."""
    from podium import Agent, FunctionModel, tool, tool_call_reply
    from podium.gateway.service import ServedAgent

    second, release = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    @tool
    async def wait_here(query: str) -> str:
        """Wait.

        Args:
            query: Ignored.
        """
        calls.append(1)
        if len(calls) == 2:  # step 0 is journaled: park the run here
            second.set()
            await release.wait()
        return "ok"

    agent = Agent("stepper", FunctionModel(
        lambda m, r: tool_call_reply(("wait_here", {"query": "x"})) if r.step < 2 else "done"),
        tools=[wait_here])
    async with gateway_client(agents=[ServedAgent(agent)]) as (_, client):
        run = (await client.post("/v1/runs", json={"agent": "stepper", "input": "go"})).json()
        await asyncio.wait_for(second.wait(), 30)
        seen = (await client.get(f"/v1/runs/{run['id']}")).json()
        release.set()
        done = (await client.post("/v1/runs", json={"agent": "stepper", "input": "again",
                                                    "wait": True})).json()
    assert seen["status"] == "running" and seen["steps"] == 1, seen
    assert seen["usage"]["requests"] == 1, seen
    assert done["status"] == "completed"
