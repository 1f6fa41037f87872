"""Podium as a fleet across hosts (network namespaces on one machine): runs submitted to
either gateway complete on any worker; a worker host cut off has its runs finished
elsewhere with no completed call repeated; a client retries a cut-off gateway's runs on
the other; a cut-off Redis is a 503 with Retry-After, then recovery; two workers with one
hostname and one PID stay two; every worker replaced under load loses nothing.

A call counts as repeated when its idempotency key was executed twice on the Redis host
(the tool's effect goes there over the network, as an outside system's would).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from functools import partial
from typing import Any

import pytest

from .podium_fleet import GATEWAYS, PodiumFleet, wait_for

# One worker runs the module, so the module-scoped fleet (namespaces, Redis, gateways and
# workers: about 8 s to build on a busy machine) is built once, not once per xdist worker
# that drew one of its tests (four builds at -n 4).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fleet")]


def _completed(report: dict[str, Any], n: int) -> list[dict[str, Any]]:
    assert report["errors"] == [], report["errors"]
    runs: list[dict[str, Any]] = report["runs"]
    assert len(runs) == n and all(r["status"] == "completed" for r in runs), runs
    return runs


def _repeated(fleet: PodiumFleet) -> dict[str, int]:
    return {key: n for key, n in fleet.effects().items() if n > 1}


def _holds_a_run(fleet: PodiumFleet, consumer: str) -> bool:
    return fleet.pending(consumer) > 0


def _hosts_by_run(fleet: PodiumFleet) -> dict[str, set[str]]:
    by_run: dict[str, set[str]] = {}
    for key, host in fleet.effect_hosts().items():
        by_run.setdefault(key.split(":")[0], set()).add(host)
    return by_run


def test_runs_on_either_gateway_complete_on_any_worker(workers_up: PodiumFleet) -> None:
    fleet = workers_up
    runs = _completed(fleet.client(36, tag="either", concurrency=36), 36)
    assert {r["via"] for r in runs} == {fleet.url(g) for g in GATEWAYS}
    hosts = Counter(h for h in fleet.effect_hosts().values())
    assert len(hosts) >= 2, hosts  # 36 runs at once, 8 per worker: more than one drove them
    assert _repeated(fleet) == {}


def test_a_worker_cut_off_has_its_runs_finished_elsewhere(workers_up: PodiumFleet) -> None:
    """w1, alone and driving one run at a time, is cut off a second before its next
    effect (tools wait 1 s): no effect of it can be on the wire at the cut, so any
    repeat would be a completed call run again. The others come up and finish it all."""
    fleet = workers_up
    for host in fleet.worker_hosts:
        fleet.stop_worker(host)
    fleet.set_tool_delay(1.0)
    w1 = fleet.workers["w1"] = fleet.start_worker("w1", "--concurrency", "1")
    before = set(fleet.effects())
    client = subprocess.Popen(fleet.net.argv("client", fleet.client_argv(
        12, tag="cut-worker", concurrency=12, deadline_s=60)), stdout=subprocess.PIPE)
    try:
        fleet.wait_ready(w1)
        wait_for(lambda: any(h == "w1" for k, h in fleet.effect_hosts().items()
                             if k not in before), 30, "w1 to make an effect")
        fleet.net.cut("w1")
        fleet.ensure_workers()  # w2 and w3: they take the rest, and w1's run once its lease ends
        out, _ = client.communicate(timeout=90)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        # The host dies and is replaced: what it sent into the cut link is never delivered.
        fleet.net.kill(fleet.workers.pop("w1").proc)
        fleet.net.replace("w1")
        fleet.set_tool_delay(0.05)
    runs = _completed(json.loads(out), 12)
    moved = {r["id"] for r in runs} & {
        run for run, hosts in _hosts_by_run(fleet).items() if "w1" in hosts and len(hosts) > 1
    }
    assert len(moved) == 1, _hosts_by_run(fleet)  # started on w1, finished on another host
    assert _repeated(fleet) == {}


def test_a_gateway_cut_off_and_the_client_retries_on_the_other(workers_up: PodiumFleet) -> None:
    fleet = workers_up
    fleet.net.cut("gw1")
    try:
        runs = _completed(fleet.client(10, tag="cut-gateway", deadline_s=40), 10)
        assert {r["via"] for r in runs} == {fleet.url("gw2")}
    finally:
        fleet.net.mend("gw1")
    runs = _completed(fleet.client(4, gateways=["gw1"], tag="gw1-back", deadline_s=40), 4)
    assert _repeated(fleet) == {}


def test_redis_cut_off_is_503_with_retry_after_then_recovers(workers_up: PodiumFleet) -> None:
    fleet = workers_up
    fleet.net.cut("redis")
    try:
        status, headers = fleet.post_once("gw1")
        assert status == 503, (status, headers)
        assert float(headers["retry-after"]) > 0
    finally:
        fleet.net.mend("redis")
    _completed(fleet.client(6, tag="redis-back", deadline_s=60), 6)
    assert _repeated(fleet) == {}


def test_two_workers_with_one_hostname_and_pid_stay_two(workers_up: PodiumFleet) -> None:
    fleet = workers_up
    for host in list(fleet.workers):
        fleet.stop_worker(host)
    # Each its own PID and UTS namespace: hostname "same", PID 1 (exec'd by sh).
    wrap = ["unshare", "--pid", "--uts", "--fork", "--kill-child", "sh", "-c",
            'hostname same && exec "$@"', "sh"]
    twins = [fleet.start_worker(host, wrap=wrap, name=f"twin-{host}") for host in ("w1", "w2")]
    try:
        for twin in twins:
            fleet.wait_ready(twin)
        names = [t.consumer for t in twins]
        assert all(n.startswith("same-1-") for n in names) and names[0] != names[1], names
        _completed(fleet.client(24, tag="twins", concurrency=24), 24)
        hosts = set(fleet.effect_hosts().values())
        assert {"twin-w1", "twin-w2"} <= hosts, hosts  # both drove runs, each its own
        assert _repeated(fleet) == {}
    finally:
        for twin in twins:
            fleet.net.kill(twin.proc)


def test_every_worker_replaced_under_load_loses_nothing(workers_up: PodiumFleet) -> None:
    """Runs keep coming (5/s, each ~2 s of tool waits); each worker in turn, once it holds
    a run, is replaced: a new one up, then SIGTERM to the old, which hands its runs over."""
    fleet = workers_up
    n = 60
    fleet.set_tool_delay(0.5)
    client = subprocess.Popen(fleet.net.argv("client", fleet.client_argv(
        n, tag="rolling", rate=5, concurrency=64, deadline_s=90)), stdout=subprocess.PIPE)
    released = 0
    try:
        for host in fleet.worker_hosts:
            old = fleet.workers[host]
            wait_for(partial(_holds_a_run, fleet, old.consumer), 30,
                     f"the worker on {host} to hold a run")
            replacement = fleet.start_worker(host)
            fleet.wait_ready(replacement)
            assert fleet.stop_worker(host, signal.SIGTERM) == 0, old.text()
            fleet.workers[host] = replacement
            released += old.statistics()["released"]
        out, _ = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        fleet.set_tool_delay(0.05)
    _completed(json.loads(out), n)
    assert released > 0  # the drains did hand runs over
    assert _repeated(fleet) == {}
