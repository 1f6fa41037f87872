"""Threads over HTTP: /v1/threads, runs with a thread_id, the chat facade's thread_id,
tenant isolation, and the 4xx a clumsy or hostile client gets."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import openai
import pytest

from conftest import KEY_B, default_agents, gateway_client
from podium import Agent, FunctionModel, ModelRequest
from podium.gateway.app import create_app
from podium.gateway.service import ServedAgent
from podium.messages import Message

pytestmark = pytest.mark.anyio


def counting_reply(messages: Sequence[Message], request: ModelRequest) -> str:
    """``<n> said, last: <text>`` where n counts the user messages the model was sent."""
    users = [m.content for m in messages if m.role == "user"]
    return f"{len(users)} said, last: {users[-1]}"


def agents() -> list[ServedAgent]:
    return [ServedAgent(Agent("counter", FunctionModel(counting_reply), "Count."))]


async def new_thread(client: httpx.AsyncClient, **body: object) -> str:
    r = await client.post("/v1/threads", json=body)
    assert r.status_code == 201, r.text
    thread = r.json()
    assert thread["object"] == "thread" and r.headers["location"] == f"/v1/threads/{thread['id']}"
    assert (thread["runs"], thread["turns"], thread["pending"]) == (0, 0, 0)
    return str(thread["id"])


async def run(client: httpx.AsyncClient, thread_id: str | None, text: str) -> dict[str, object]:
    body: dict[str, object] = {"agent": "counter", "input": text, "wait": True}
    if thread_id is not None:
        body["thread_id"] = thread_id
    r = await client.post("/v1/runs", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, object] = r.json()
    return out


async def test_runs_on_a_thread_continue_the_conversation() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        thread_id = await new_thread(client, metadata={"customer": "c-1"})
        first = await run(client, thread_id, "hello")
        second = await run(client, thread_id, "again")
        alone = await run(client, None, "alone")
        assert first["output"] == "1 said, last: hello"
        assert second["output"] == "2 said, last: again"
        assert alone["output"] == "1 said, last: alone"
        assert second["thread_id"] == thread_id and alone["thread_id"] is None

        r = await client.get(f"/v1/threads/{thread_id}")
        assert r.status_code == 200
        thread = r.json()
        assert thread["run_ids"] == [first["id"], second["id"]]
        assert (thread["runs"], thread["turns"], thread["pending"]) == (2, 2, 0)
        assert thread["metadata"] == {"customer": "c-1"}
        assert [(m["role"], m["content"]) for m in thread["messages"]] == [
            ("user", "hello"), ("assistant", "1 said, last: hello"),
            ("user", "again"), ("assistant", "2 said, last: again"),
        ]
        listed = (await client.get("/v1/threads")).json()
        assert [t["id"] for t in listed["data"]] == [thread_id]

        r = await client.delete(f"/v1/threads/{thread_id}")
        assert r.status_code == 200
        assert r.json() == {"id": thread_id, "object": "thread.deleted", "deleted": True}
        assert (await client.get(f"/v1/threads/{thread_id}")).status_code == 404
        assert (await client.get(f"/v1/runs/{first['id']}")).status_code == 200  # runs stay
        assert (await client.get("/v1/threads")).json()["data"] == []


async def test_concurrent_runs_on_one_thread_are_serialized() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        thread_id = await new_thread(client)
        outputs = await asyncio.gather(*(run(client, thread_id, f"m{i}") for i in range(4)))
        # Each run saw every run before it: the counts are 1..4, once each.
        counts = sorted(int(str(o["output"]).split()[0]) for o in outputs)
        assert counts == [1, 2, 3, 4]
        thread = (await client.get(f"/v1/threads/{thread_id}")).json()
        assert thread["turns"] == 4 and len(thread["messages"]) == 8


async def test_another_tenants_thread_is_not_found() -> None:
    async with gateway_client(agents=agents()) as (gw, client):
        thread_id = await new_thread(client)
        await run(client, thread_id, "secret")
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://podium.test",
            headers={"Authorization": f"Bearer {KEY_B}"},
        ) as other:
            for r in (
                await other.get(f"/v1/threads/{thread_id}"),
                await other.delete(f"/v1/threads/{thread_id}"),
                await other.post("/v1/runs", json={
                    "agent": "counter", "input": "x", "thread_id": thread_id}),
            ):
                assert r.status_code == 404, r.text
                assert r.json()["error"]["type"] == "not_found"
                assert "secret" not in r.text
            assert (await other.get("/v1/threads")).json()["data"] == []
        # A's thread is untouched: nothing joined it.
        assert (await client.get(f"/v1/threads/{thread_id}")).json()["runs"] == 1


@pytest.mark.parametrize(
    "bad",
    ["a b", "../etc", "thr/x", "é", "-leading", "x" * 129, "", "a\nb", "{tag}"],
)
async def test_malformed_thread_ids_are_a_422(bad: str) -> None:
    async with gateway_client(agents=agents()) as (_, client):
        r = await client.post("/v1/runs", json={"agent": "counter", "input": "x",
                                               "thread_id": bad})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == "thread_id"
        if bad and "/" not in bad and "\n" not in bad:
            r = await client.get(f"/v1/threads/{bad}")
            assert r.status_code == 422, r.text
            assert "thread id" in r.json()["error"]["message"]


async def test_unknown_thread_ids_are_a_404_and_start_nothing() -> None:
    async with gateway_client(agents=agents()) as (gw, client):
        for r in (
            await client.post("/v1/runs", json={"agent": "counter", "input": "x",
                                               "thread_id": "thr_nope"}),
            await client.get("/v1/threads/thr_nope"),
            await client.delete("/v1/threads/thr_nope"),
        ):
            assert r.status_code == 404, r.text
            assert r.json()["error"] == {
                "type": "not_found", "message": "no thread 'thr_nope'", "field": "thread_id"}
        assert await gw.store.list() == []
        for body in ({"ttl_s": 0}, {"ttl_s": -1}, {"ttl": 5}, {"metadata": {"k": 1}}):
            r = await client.post("/v1/threads", json=body)
            assert r.status_code == 422, (body, r.text)
        assert (await client.get("/v1/threads?limit=0")).status_code == 422


async def test_the_chat_facade_continues_a_thread_for_the_openai_sdk() -> None:
    async with gateway_client(agents=agents()) as (gw, client):
        thread_id = await new_thread(client)
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://podium.test") as http,
            openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key="pk_test_tenant_a",
                               http_client=http, max_retries=0) as sdk,
        ):
            for text, expected in (("hi", "1 said, last: hi"), ("more", "2 said, last: more")):
                reply = await sdk.chat.completions.create(
                    model="counter",
                    messages=[{"role": "user", "content": text}],
                    extra_body={"thread_id": thread_id},
                )
                assert reply.choices[0].message.content == expected
            with pytest.raises(openai.NotFoundError):
                await sdk.chat.completions.create(
                    model="counter", messages=[{"role": "user", "content": "x"}],
                    extra_body={"thread_id": "thr_unknown"},
                )
        thread = (await client.get(f"/v1/threads/{thread_id}")).json()
        assert thread["turns"] == 2


async def test_cancelling_runs_on_a_thread_frees_it() -> None:
    """A run waiting for its turn behind a long one can be cancelled; cancelling the long
    one lets the next run start at once; neither adds a turn."""
    async with gateway_client(agents=[*agents(), *default_agents()]) as (_, client):
        thread_id = await new_thread(client)
        long = (await client.post("/v1/runs", json={
            "agent": "sleepy", "input": "take your time", "thread_id": thread_id})).json()
        waiting = (await client.post("/v1/runs", json={
            "agent": "counter", "input": "behind", "thread_id": thread_id})).json()
        await asyncio.sleep(0.2)
        assert (await client.get(f"/v1/runs/{waiting['id']}")).json()["status"] == "queued"
        r = await client.post(f"/v1/runs/{waiting['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        r = await client.post(f"/v1/runs/{long['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        after = await run(client, thread_id, "after")
        assert after["output"] == "1 said, last: after"  # the cancelled runs left no turn
        thread = (await client.get(f"/v1/threads/{thread_id}")).json()
        assert thread["run_ids"] == [long["id"], waiting["id"], after["id"]]
        assert (thread["turns"], thread["pending"]) == (1, 0)
