"""Token buckets, the backlog gate, the AIMD controller, and 429s through the API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import KEY_B, gateway_client
from podium.config import AdaptiveConfig, LimitsConfig, PoolConfig
from podium.gateway.admission import (
    Admission,
    AimdController,
    BacklogGate,
    TokenBucket,
    thread_cpu_demand,
)
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3.0, clock=clock)
    for _ in range(3):
        assert bucket.wait_time() == 0
        bucket.take()
    assert bucket.wait_time() == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.wait_time() == 0


def test_a_refused_run_costs_no_tokens() -> None:
    clock = FakeClock()
    limits = LimitsConfig(tenant_rate=10, tenant_burst=10)
    admission = Admission(limits, {"default": PoolConfig(rate=1, burst=1)}, clock=clock)
    tenant = Tenant("t")
    admission.admit(tenant, "default", 0)
    with pytest.raises(ApiError) as refused:
        admission.admit(tenant, "default", 0)
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
    assert admission.statistics().rejected == {"default:rate_limited": 1}
    # The tenant's bucket was not charged for the refused run: 9 tokens left.
    assert admission._tenant_bucket(tenant).statistics().tokens == pytest.approx(9)


def test_a_full_queue_says_which_limit_it_hit() -> None:
    admission = Admission(LimitsConfig(), {"default": PoolConfig(max_queue=3)})
    with pytest.raises(ApiError, match="has 3 runs waiting; its max_queue is 3"):
        admission.admit(Tenant("t"), "default", 3)
    slow = Admission(LimitsConfig(), {"default": PoolConfig(expected_run_s=20.0)})
    with pytest.raises(ApiError, match="would miss its latency target"):  # 256 slots, 10 s room
        slow.admit(Tenant("t"), "default", 200)


def test_backlog_gate_bounds_the_queue_by_the_latency_target() -> None:
    gate = BacklogGate(slots=10, latency_target_s=2.0, expected_run_s=0.5, max_queue=1000)
    assert gate.max_waiting == 30  # 10 slots × (2.0 − 0.5) s / 0.5 s
    assert gate.retry_after(29) is None
    assert gate.retry_after(30) == pytest.approx(0.5)
    for _ in range(200):
        gate.observe(1.0)  # runs got slower: the bound shrinks
    assert gate.max_waiting == 10


def test_aimd_lowers_the_limit_under_load_and_raises_it_back() -> None:
    clock, cpu = FakeClock(), FakeClock()
    cfg = AdaptiveConfig(max_rate=100, min_rate=1, decrease=0.5, increase=0.1, interval_s=1)
    aimd = AimdController(cfg, cpu_clock=cpu, clock=clock)
    for _ in range(40):
        aimd.bucket.take()
    clock.now += 1
    cpu.now += 0.95  # 95 % of a core
    assert aimd.step() == pytest.approx(20)  # min(limit, admitted 40/s) × 0.5
    clock.now += 1
    cpu.now += 0.2
    assert aimd.step() == pytest.approx(30)  # + 0.1 × max_rate
    for _ in range(20):
        clock.now += 1
        aimd.step()
    assert aimd.limit == 100 and aimd.statistics().decreases == 1


def test_aimd_counts_a_loop_that_waits_for_its_cpu_as_load() -> None:
    # A shared machine: the process gets 40 % of a core, but its loop thread was running
    # or waiting to run for 95 % of the interval.
    clock, cpu, demand = FakeClock(), FakeClock(), FakeClock()
    cfg = AdaptiveConfig(max_rate=100, min_rate=1, decrease=0.5, increase=0.1, interval_s=1)
    aimd = AimdController(cfg, cpu_clock=cpu, demand_clock=demand, clock=clock)
    aimd.step()  # the first step takes the demand clock's baseline
    clock.now += 1
    cpu.now += 0.4
    demand.now += 0.95
    aimd.step()
    stats = aimd.statistics()
    assert stats.overloaded and stats.cpu_utilization == pytest.approx(0.4)
    assert stats.cpu_demand == pytest.approx(0.95) and aimd.limit == pytest.approx(50)
    clock.now += 1
    cpu.now += 0.4
    demand.now += 0.5  # no longer waiting: the same 40 % is not overload
    aimd.step()
    assert not aimd.statistics().overloaded and aimd.limit == pytest.approx(60)


def test_aimd_without_scheduler_statistics_goes_by_process_cpu() -> None:
    clock, cpu = FakeClock(), FakeClock()
    cfg = AdaptiveConfig(max_rate=100, min_rate=1, decrease=0.5, increase=0.1, interval_s=1)
    aimd = AimdController(cfg, cpu_clock=cpu, demand_clock=lambda: None, clock=clock)
    aimd.step()
    clock.now += 1
    cpu.now += 0.5
    aimd.step()
    assert aimd.statistics().cpu_demand == 0.0 and not aimd.overloaded
    clock.now += 1
    cpu.now += 0.9
    aimd.step()
    assert aimd.overloaded


def _share_one_cpu_with_a_burner() -> tuple[int, subprocess.Popen[str]]:
    """Pin this thread to one CPU and start a process spinning on the same one."""
    if thread_cpu_demand() is None:
        pytest.skip("no scheduler statistics for threads (not Linux)")
    cpu = min(os.sched_getaffinity(0))
    burner = subprocess.Popen(
        [sys.executable, "-c",
         f"import os; os.sched_setaffinity(0, {{{cpu}}}); print('spinning', flush=True)\n"
         "while True: pass"],
        stdout=subprocess.PIPE, text=True,
    )
    assert burner.stdout is not None and burner.stdout.readline() == "spinning\n"
    return cpu, burner


def test_aimd_sees_a_saturated_loop_that_gets_half_a_core() -> None:
    # The case process CPU cannot show: this thread spins (a saturated loop) while another
    # process spins on the same CPU, so it gets about half of it; the default threshold.
    cfg = AdaptiveConfig(max_rate=100, interval_s=1)
    aimd = AimdController(cfg)
    before = os.sched_getaffinity(0)
    cpu, burner = _share_one_cpu_with_a_burner()
    try:
        os.sched_setaffinity(0, {cpu})  # this thread only (Linux affinity is per thread)
        aimd.step()
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
        aimd.step()
    finally:
        os.sched_setaffinity(0, before)
        burner.kill()
        burner.wait()
        assert burner.stdout is not None
        burner.stdout.close()
    stats = aimd.statistics()
    assert stats.cpu_utilization < 0.75, stats  # only a share of the core …
    assert stats.cpu_demand > cfg.cpu_threshold, stats  # … but the loop never idled
    assert stats.overloaded and aimd.limit < cfg.max_rate


@pytest.mark.anyio
async def test_aimd_reacts_to_real_cpu_burn_and_recovers() -> None:
    # The burning thread has a core to itself only on an idle machine; on a loaded one it
    # gets a share (under 20 % of a core seen with the load average at 9 on 2 cores), so
    # the threshold sits between that and the idle process's use (well under 1 %).
    cfg = AdaptiveConfig(
        max_rate=200, interval_s=0.05, increase=0.25, decrease=0.5, cpu_threshold=0.05
    )
    aimd = AimdController(cfg)
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(range(1000))

    aimd.start()
    burner = threading.Thread(target=burn)
    burner.start()
    try:
        while aimd.limit >= cfg.max_rate:
            aimd.changed.clear()
            await asyncio.wait_for(aimd.changed.wait(), 10)
        lowered = aimd.limit
    finally:
        stop.set()
        burner.join()
    while aimd.limit < cfg.max_rate:
        aimd.changed.clear()
        await asyncio.wait_for(aimd.changed.wait(), 10)
    await aimd.stop()
    assert lowered < cfg.max_rate and aimd.statistics().increases >= 1


@pytest.mark.anyio
async def test_tenant_over_its_rate_gets_429_with_retry_after() -> None:
    env = {"PODIUM_LIMITS__TENANT_RATE": "0.5", "PODIUM_LIMITS__TENANT_BURST": "2"}
    async with gateway_client(env) as (gw, client):
        codes = [
            (await client.post("/v1/runs", json={"agent": "react", "input": "q"})) for _ in range(3)
        ]
        assert [r.status_code for r in codes] == [202, 202, 429]
        refused = codes[-1]
        assert refused.json()["error"]["type"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 2
        assert refused.json()["error"]["retry_after"] == pytest.approx(2.0, abs=0.1)
        # Another tenant has its own bucket.
        other = await client.post(
            "/v1/runs",
            json={"agent": "react", "input": "q"},
            headers={"Authorization": f"Bearer {KEY_B}"},
        )
        assert other.status_code == 202
        assert len(await gw.store.list()) == 3


@pytest.mark.anyio
async def test_full_backlog_sheds_with_queue_full() -> None:
    env = {
        "PODIUM_POOLS__DEFAULT__WORKERS": "0",  # nothing drains the queue
        "PODIUM_POOLS__DEFAULT__CONCURRENCY": "2",
        "PODIUM_POOLS__DEFAULT__LATENCY_TARGET_S": "3",
        "PODIUM_POOLS__DEFAULT__EXPECTED_RUN_S": "1",
    }
    async with gateway_client(env) as (_, client):
        codes = [
            (await client.post("/v1/runs", json={"agent": "react", "input": "q"})) for _ in range(5)
        ]
        # 2 slots (the one-worker minimum) × (3 − 1) s / 1 s = 4 may wait.
        assert [r.status_code for r in codes] == [202, 202, 202, 202, 429]
        assert codes[-1].json()["error"]["type"] == "queue_full"
        assert int(codes[-1].headers["retry-after"]) >= 1


@pytest.mark.anyio
async def test_adaptive_limit_drops_under_a_cpu_burning_agent_and_recovers() -> None:
    """Runs whose tool blocks the loop for 20 ms overload the process: the limit (a metric)
    falls and new runs are shed as overloaded; once they finish it climbs back.

    The loop-lag threshold is set below one such block: the process's CPU utilization
    passes 85 % only where it has a core to itself, and a loaded CI machine gives it less
    (the 20 ms are wall time), so CPU alone is no signal this test can count on."""
    import gateway_agents

    from podium.gateway.service import ServedAgent

    env = {
        "PODIUM_LIMITS__ADAPTIVE__ENABLED": "true",
        "PODIUM_LIMITS__ADAPTIVE__INTERVAL_S": "0.1",
        "PODIUM_LIMITS__ADAPTIVE__MAX_RATE": "50",
        "PODIUM_LIMITS__ADAPTIVE__INCREASE": "0.2",
        "PODIUM_LIMITS__ADAPTIVE__LAG_THRESHOLD_MS": "15",
    }
    async with gateway_client(env, [ServedAgent(gateway_agents.burner())]) as (gw, client):
        aimd = gw.admission.controller

        def limit_metric() -> float:
            text = gw.metrics.render().decode()
            line = next(x for x in text.splitlines() if x.startswith("podium_admission_limit "))
            return float(line.split()[1])

        assert limit_metric() == 50
        statuses: list[int] = []
        deadline = time.monotonic() + 20
        while aimd.limit >= 50 and time.monotonic() < deadline:
            r = await client.post("/v1/runs", json={"agent": "burner", "input": "q"})
            statuses.append(r.status_code)
            await asyncio.sleep(0.01)  # pace the load like a client would
        assert aimd.limit < 50 and limit_metric() < 50, (aimd.statistics(), statuses)
        while True:  # keep offering load until a run is shed as overloaded
            r = await client.post("/v1/runs", json={"agent": "burner", "input": "q"})
            if r.status_code == 429:
                assert r.json()["error"]["type"] == "overloaded"
                break
            await asyncio.sleep(0.01)
        while aimd.limit < 50:  # load stopped: recovers
            aimd.changed.clear()
            await asyncio.wait_for(aimd.changed.wait(), 20)
        assert limit_metric() == 50 and 202 in statuses
