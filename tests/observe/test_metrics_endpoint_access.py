"""Who may read a worker's metrics: the endpoint listens on loopback unless told
otherwise, and with a token asks ``/metrics`` for it; the probes answer anyone."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from podium.observe.serve_metrics import HealthProbes, _listen


def test_the_metrics_port_is_loopback_and_asks_for_its_token() -> None:
    registry = CollectorRegistry()
    Counter("podium_test_things", "Things.", registry=registry).inc()
    probes = HealthProbes(lambda: (True, {"worker": "ok"}), lambda: (True, {"store": "ok"}))
    server = _listen(0, registry, probes=probes, token="s3cret")
    try:
        host, port = server.socket.getsockname()[:2]
        assert host == "127.0.0.1"  # the default: this host only
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10) as client:
            refused = client.get("/metrics")
            assert refused.status_code == 401
            assert refused.headers["WWW-Authenticate"] == "Bearer"
            assert "podium_test_things" not in refused.text
            wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200 and "podium_test_things_total 1.0" in ok.text
            # A kubelet sends no token: the probes stay open.
            assert client.get("/livez").status_code == 200
            assert client.get("/readyz").status_code == 200
    finally:
        server.shutdown()
        server.server_close()


def test_without_a_token_the_metrics_are_open_on_the_host_asked_for() -> None:
    registry = CollectorRegistry()
    server = _listen(0, registry, host="0.0.0.0")
    try:
        host, port = server.socket.getsockname()[:2]
        assert host == "0.0.0.0"
        resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert resp.status_code == 200
    finally:
        server.shutdown()
        server.server_close()
