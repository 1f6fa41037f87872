"""Sub-agents over the API: a run's children listed, linked both ways, tenant-scoped; and
sub-agents and hand-offs declared in podium.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import KEY_B, gateway_client
from podium.config import load_config
from podium.errors import ConfigError
from podium.examples import research_team
from podium.factory import served_agents
from podium.gateway.service import ServedAgent

pytestmark = pytest.mark.anyio


async def test_children_of_a_run_are_listed_in_call_order() -> None:
    async with gateway_client(agents=[ServedAgent(research_team.build_agent())]) as (gw, client):
        r = await client.post("/v1/runs",
                              json={"agent": "research-team", "input": "durability and security"})
        await gw.wait(r.json()["id"], 10)
        run = (await client.get(f"/v1/runs/{r.json()['id']}")).json()
        assert run["status"] == "completed" and run["parent_run_id"] is None
        r = await client.get(f"/v1/runs/{run['id']}/children")
        assert r.status_code == 200
        children = r.json()["data"]
        assert [(c["agent"], c["input"], c["parent_call"]) for c in children] == [
            ("researcher", "durability", "0:0"), ("researcher", "security", "0:1")]
        assert all(c["parent_run_id"] == run["id"] and c["status"] == "completed"
                   for c in children)
        r = await client.get(f"/v1/runs/{children[0]['id']}")
        assert r.status_code == 200 and r.json()["output"].startswith("durability:")
        assert (await client.get(f"/v1/runs/{children[0]['id']}/children")).json()["data"] == []
        other = {"Authorization": f"Bearer {KEY_B}"}
        r = await client.get(f"/v1/runs/{run['id']}/children", headers=other)
        assert r.status_code == 404
        assert (await client.get("/v1/runs/nope/children")).status_code == 404


TOML = """
[[models]]
name = "m"
model = "m"
base_url = "http://127.0.0.1:9/v1"

[[agents]]
name = "lead"
model = "m"
subagents = ["researcher"]
handoffs = ["billing"]
max_parallel_children = 2

[[agents]]
name = "researcher"
model = "m"

[[agents]]
name = "billing"
model = "m"
handoffs = ["lead"]
"""


def test_declared_agents_take_sub_agents_and_hand_offs(tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(TOML)
    agents = {s.name: s.agent for s in served_agents(load_config(path, {}))}
    lead, billing = agents["lead"], agents["billing"]
    assert set(lead.tools) == {"researcher", "transfer_to_billing"}
    assert lead.tools["researcher"].agent is agents["researcher"]  # type: ignore[attr-defined]
    assert lead.max_parallel_children == 2
    assert lead.handoffs["transfer_to_billing"].target is billing
    assert billing.handoffs["transfer_to_lead"].target is lead


@pytest.mark.parametrize(("edit", "message"), [
    (("subagents = [\"researcher\"]", "subagents = [\"nobody\"]"),
     "'lead' names sub-agent 'nobody', which no [[agents]] entry names"),
    (("handoffs = [\"lead\"]", "handoffs = [\"ghost\"]"),
     "'billing' names hand-off 'ghost'"),
    (("name = \"researcher\"\nmodel = \"m\"", "name = \"researcher\"\nmodel = \"m\"\n"
      "subagents = [\"lead\"]"), "cycle: lead -> researcher -> lead"),
])
def test_unknown_or_cyclic_sub_agents_are_config_errors(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(TOML.replace(*edit))
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert message in str(info.value)
