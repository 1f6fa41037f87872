"""Through a real ``podium serve`` process on loopback: HTTP, SSE resume, the openai client."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import openai
import pytest

from conftest import (
    KEY_A,
    KEY_ADMIN,
    KEY_B,
    KEY_LIMITED,
    SERVER_CONFIG,
    ServerProcess,
    podium_server,
)

pytestmark = pytest.mark.slow


def test_runs_over_http(server: ServerProcess) -> None:
    with server.client() as client:
        r = client.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
        assert r.status_code == 200 and r.json()["output"] == "42."
        run_id = r.json()["id"]
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
        assert any(x["id"] == run_id for x in client.get("/v1/runs").json()["data"])
        assert [a["name"] for a in client.get("/v1/agents").json()["data"]] == [
            "react",
            "slow",
            "sleepy",
        ]
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"
        assert client.get("/metrics").status_code == 403
        admin = {"Authorization": f"Bearer {KEY_ADMIN}"}
        assert "podium_admission_limit" in client.get("/metrics", headers=admin).text


def test_sse_resumes_with_last_event_id_after_a_dropped_connection(server: ServerProcess) -> None:
    with server.client() as client:
        run_id = client.post("/v1/runs", json={"agent": "slow", "input": "q"}).json()["id"]
        seen: list[str] = []
        with client.stream("GET", f"/v1/runs/{run_id}/events") as r:
            for line in r.iter_lines():
                if line.startswith("id: "):
                    seen.append(line[4:])
                if len(seen) == 2:
                    break  # the connection drops mid-run
        rest: list[str] = []
        events: list[str] = []
        headers = {"Last-Event-ID": seen[-1]}
        with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
            for line in r.iter_lines():
                if line.startswith("id: "):
                    rest.append(line[4:])
                elif line.startswith("event: "):
                    events.append(line[7:])
        ids = [int(i) for i in seen + rest]
        assert ids == list(range(len(ids))) and events[-1] == "final"


def test_tenant_isolation_over_http(server: ServerProcess) -> None:
    with server.client(KEY_A) as a, server.client(KEY_B) as b:
        run_id = a.post("/v1/runs", json={"agent": "react", "input": "mine"}).json()["id"]
        r = b.get(f"/v1/runs/{run_id}")
        assert r.status_code == 404 and "mine" not in r.text
        assert all(x["id"] != run_id for x in b.get("/v1/runs").json()["data"])


def test_rate_limited_tenant_gets_429_with_retry_after(server: ServerProcess) -> None:
    with server.client(KEY_LIMITED) as client:
        codes = [client.post("/v1/runs", json={"agent": "react", "input": "q"}) for _ in range(3)]
        assert [r.status_code for r in codes] == [202, 202, 429]
        assert int(codes[-1].headers["Retry-After"]) >= 1
        assert codes[-1].json()["error"]["type"] == "rate_limited"


def test_openai_client_talks_to_an_agent(server: ServerProcess) -> None:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY_A, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="react", messages=[{"role": "user", "content": "find podium"}]
        )
        assert reply.choices[0].message.content == "42."
        assert reply.choices[0].finish_reason == "stop" and reply.usage is not None
        assert reply.usage.total_tokens > 0

        stream = client.chat.completions.create(
            model="slow",
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "slow answer"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(
                model="nobody", messages=[{"role": "user", "content": "q"}]
            )


def test_graceful_shutdown_drains_in_flight_runs(tmp_path: Path) -> None:
    with podium_server(tmp_path) as srv, srv.client() as client:
        body = {"agent": "slow", "input": "q", "stream": True}
        events: list[str] = []
        with client.stream("POST", "/v1/runs", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    events.append(line[7:])
                    if len(events) == 1:  # the run is mid-flight: stop the server now
                        srv.proc.send_signal(signal.SIGTERM)
        # The stream was allowed to finish: the run completed before the process exited.
        events = [e for e in events if e != "delta"]  # the model's tokens, between steps
        assert events[0] == "model_reply" and events[-1] == "final"
        assert events.count("step_finished") == 3
        # uvicorn re-raises SIGTERM once it has shut down cleanly, for the conventional status.
        assert srv.proc.wait(30) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in "".join(srv.lines)


def test_a_stop_ends_every_stream_with_a_reconnect_event(tmp_path: Path) -> None:
    """SIGTERM with followers of runs that cannot end in the grace (one waits for a human,
    one is mid-way through a 30 s model call): once the runs have paused, each stream
    gets a ``shutting_down`` error event and ends cleanly; the server exits on time with
    nothing in its log but the drain (before: the streams were cut at the grace's end
    with no event, and uvicorn logged a CancelledError traceback)."""
    config = SERVER_CONFIG.replace("drain_grace_s = 10", "drain_grace_s = 2")
    config += '\n[[agents]]\npath = "podium.examples.refunds:agent"\n'
    with podium_server(tmp_path, config) as srv, srv.client() as client:
        waiting = client.post("/v1/runs", json={
            "agent": "refunds", "input": "Refund 250 on order A-1001",
            "wait": True,
        }).json()
        assert waiting["status"] == "waiting", waiting
        sleepy = client.post("/v1/runs", json={"agent": "sleepy", "input": "q"}).json()
        streams: dict[str, list[str]] = {}
        errors: list[BaseException] = []
        opened = threading.Barrier(3)

        def follow(run_id: str) -> None:
            lines = streams.setdefault(run_id, [])
            try:
                with srv.client() as c, c.stream("GET", f"/v1/runs/{run_id}/events") as r:
                    opened.wait(10)
                    lines.extend(r.iter_lines())
            except BaseException as exc:  # a cut stream: RemoteProtocolError
                errors.append(exc)

        threads = [threading.Thread(target=follow, args=(run["id"],))
                   for run in (waiting, sleepy)]
        for t in threads:
            t.start()
        opened.wait(10)
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    assert errors == []
    for run_id, lines in streams.items():
        events = [line[7:] for line in lines if line.startswith("event: ")]
        assert events[-1] == "error", (run_id, lines)
        assert '"shutting_down"' in lines[-1] or any('"shutting_down"' in x for x in lines[-3:])
    log = "".join(srv.lines)
    assert "Traceback" not in log and "ERROR" not in log, log
