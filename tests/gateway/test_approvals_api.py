"""Approvals over the HTTP API (embedded gateway): list, decide, resume; 404/409/422."""

from __future__ import annotations

import httpx
import pytest

from conftest import KEY_B, gateway_client
from podium.examples import refunds
from podium.gateway.service import ServedAgent

pytestmark = pytest.mark.anyio

AGENTS = [ServedAgent(refunds.agent)]


async def _waiting_run(client: httpx.AsyncClient, text: str) -> dict[str, object]:
    r = await client.post("/v1/runs", json={"agent": "refunds", "input": text, "wait": True})
    assert r.status_code == 202, r.text  # answered as soon as it waits: not at the timeout
    body: dict[str, object] = r.json()
    assert body["status"] == "waiting"
    return body


async def test_list_approve_and_resume() -> None:
    async with gateway_client(agents=AGENTS) as (gw, client):
        run = await _waiting_run(client, "Refund 250 on order A-1001")
        listed = (await client.get("/v1/approvals")).json()["data"]
        assert [(a["run_id"], a["tool"], a["kind"]) for a in listed] == [
            (run["id"], "refund", "approval")
        ]
        assert listed[0]["arguments"] == {"order_id": "A-1001", "amount": 250}
        per_run = (await client.get(f"/v1/runs/{run['id']}/approvals")).json()["data"]
        assert per_run == listed
        call = listed[0]["call_id"]
        bad = await client.post(
            f"/v1/runs/{run['id']}/approvals/{call}",
            json={"decision": "approve", "arguments": {"order_id": "A-1001", "amount": "x"}},
        )
        assert bad.status_code == 422 and "amount" in bad.text
        ok = await client.post(
            f"/v1/runs/{run['id']}/approvals/{call}",
            json={"decision": "approve", "arguments": {"order_id": "A-1001", "amount": 120}},
        )
        assert ok.status_code == 200, ok.text
        again = await client.post(
            f"/v1/runs/{run['id']}/approvals/{call}", json={"decision": "reject"}
        )
        assert again.status_code == 409
        record = await gw.wait(str(run["id"]), 10.0)  # resumed by the gateway's worker
        assert record.status == "completed"
        assert record.output == "Done. refunded 120 on A-1001"
        assert (await client.get("/v1/approvals")).json()["data"] == []


async def test_reject_answer_cancel_and_other_tenants() -> None:
    async with gateway_client(agents=AGENTS) as (gw, client):
        run = await _waiting_run(client, "Refund 500 on order B-2001")
        (pending,) = (await client.get(f"/v1/runs/{run['id']}/approvals")).json()["data"]
        url = f"/v1/runs/{run['id']}/approvals/{pending['call_id']}"
        async with httpx.AsyncClient(
            transport=client._transport, base_url="http://podium.test",
            headers={"Authorization": f"Bearer {KEY_B}"},
        ) as other:
            assert (await other.get("/v1/approvals")).json()["data"] == []
            assert (await other.get(f"/v1/runs/{run['id']}/approvals")).status_code == 404
            assert (await other.post(url, json={"decision": "approve"})).status_code == 404
        assert (await client.post(url, json={"decision": "answer"})).status_code == 422
        assert (await client.post(url, json={"decision": "maybe"})).status_code == 422
        missing = await client.post(
            f"/v1/runs/{run['id']}/approvals/call_nope", json={"decision": "approve"}
        )
        assert missing.status_code == 404
        r = await client.post(url, json={"decision": "reject", "message": "no refunds today"})
        assert r.status_code == 200
        done = await gw.wait(str(run["id"]), 10.0)
        assert done.status == "completed" and done.output == "Done. no refunds today"

        asked = await _waiting_run(client, "Send a credit for A-1001")
        (question,) = (await client.get(f"/v1/runs/{asked['id']}/approvals")).json()["data"]
        assert question["kind"] == "interrupt" and "Which account" in question["question"]
        answer_url = f"/v1/runs/{asked['id']}/approvals/{question['call_id']}"
        r = await client.post(answer_url, json={"decision": "answer", "message": "savings"})
        assert r.status_code == 200
        assert (await gw.wait(str(asked["id"]), 10.0)).output == "Done. savings"

        parked = await _waiting_run(client, "Refund 300 on order A-1001")
        cancelled = await client.post(f"/v1/runs/{parked['id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        listed = (await client.get("/v1/runs", params={"status": "waiting"})).json()["data"]
        assert listed == []


async def test_edited_arguments_after_a_hand_off_use_the_agent_handed_to() -> None:
    """Only ``front`` is served; the run handed off to ``payments`` waits on payments'
    ``refund``: edited arguments are checked against that tool, and the run pays with them."""
    from handoff_agents import approval_desk

    paid: list[str] = []
    front, _ = approval_desk(paid)
    async with gateway_client(agents=[ServedAgent(front)]) as (gw, client):
        r = await client.post("/v1/runs", json={"agent": "front", "input": "refund A-1",
                                                "wait": True})
        run = r.json()
        assert run["status"] == "waiting", r.text
        (pending,) = (await client.get(f"/v1/runs/{run['id']}/approvals")).json()["data"]
        url = f"/v1/runs/{run['id']}/approvals/{pending['call_id']}"
        wrong = await client.post(url, json={"decision": "approve",
                                             "arguments": {"order_id": "A-1"}})
        assert wrong.status_code == 422 and "amount" in wrong.text
        ok = await client.post(url, json={"decision": "approve",
                                          "arguments": {"order": "A-1", "amount": 40}})
        assert ok.status_code == 200, ok.text
        record = await gw.wait(str(run["id"]), 10.0)
    assert record.status == "completed", record.error
    assert record.output == "payments: refunded 40 on A-1"
    assert paid == ["A-1:40"]


async def test_chat_completions_say_at_once_that_the_run_waits_for_a_human() -> None:
    """Found from the outside: a 504 "did not finish within the wait timeout" after 3 ms,
    and a stream of keep-alives until the wait timeout (300 s by default)."""
    body = {"model": "refunds", "messages": [
        {"role": "user", "content": "Refund 250 on order A-1001"}]}
    async with gateway_client(agents=AGENTS) as (_, client):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 409 and r.json()["error"]["type"] == "run_waiting", r.text
        run_id = r.headers["x-podium-run-id"]
        assert f"/v1/runs/{run_id}/approvals" in r.json()["error"]["message"]
        assert (await client.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"
        stream = await client.post("/v1/chat/completions", json={**body, "stream": True},
                                   timeout=10)
        lines = [x for x in stream.text.splitlines() if x.startswith("data: ")]
        assert '"run_waiting"' in lines[-2] and lines[-1] == "data: [DONE]", lines
