"""The agent the fleet tests serve, importable by gateway and worker processes.

``effects`` calls a side-effecting tool ``TOOL_STEPS`` times. The tool's effect lands on
the Redis host, as an outside system's would, over the fleet's network: ``HINCRBY
fleet-effects <idempotency key> 1`` on ``PODIUM_FLEET_EFFECTS`` (a Redis URL), after
``PODIUM_FLEET_TOOL_DELAY`` seconds. A worker cut off from the network cannot make an
effect, as it could not reach a real outside system; the count per key says whether a
completed call ran again.
"""

from __future__ import annotations

import asyncio
import os
import socket

import redis.asyncio as aioredis

from podium import Agent, Scenario, SimulatedModel, ToolContext, tool

TOOL_STEPS = 3
EFFECTS_KEY = "fleet-effects"
HOSTS_KEY = "fleet-effect-hosts"
DELAY_KEY = "fleet-tool-delay"
DEFAULT_DELAY_S = 0.05

_client: aioredis.Redis | None = None


def _effects() -> aioredis.Redis:
    global _client
    if _client is None:
        # Short timeouts: a worker cut off fails its call (an error result, never journaled
        # as done) instead of hanging on it.
        _client = aioredis.Redis.from_url(
            os.environ["PODIUM_FLEET_EFFECTS"], socket_timeout=2, socket_connect_timeout=1
        )
    return _client


@tool(side_effects=True)
async def effect(item: str, ctx: ToolContext) -> str:
    """Do something with an external effect.

    Args:
        item: What to act on.
    """
    effects = _effects()
    # A test sets the delay on the Redis host (no worker restart to change it).
    await asyncio.sleep(float(await effects.get(DELAY_KEY) or DEFAULT_DELAY_S))
    host = os.environ.get("PODIUM_FLEET_HOST", socket.gethostname())
    async with effects.pipeline(transaction=True) as pipe:
        pipe.hincrby(EFFECTS_KEY, ctx.idempotency_key, 1)
        pipe.hset(HOSTS_KEY, ctx.idempotency_key, host)  # which worker host made it
        await pipe.execute()
    return f"did {item} on {host}"


effects = Agent(
    "effects",
    SimulatedModel(Scenario.react("effect", {"item": "x"}, tool_steps=TOOL_STEPS)),
    "Act on the item.",
    [effect],
    max_steps=TOOL_STEPS + 2,
)


@tool
async def pause(item: str) -> str:
    """Wait on something outside (no effect).

    Args:
        item: What to wait for.
    """
    await asyncio.sleep(float(os.environ.get("PODIUM_FLEET_TOOL_DELAY", "0.05")))
    return f"waited for {item}"


#: For the scale-out bench: a step is a model call and a tool wait, nothing else on Redis.
plain = Agent(
    "plain",
    SimulatedModel(Scenario.react("pause", {"item": "x"}, tool_steps=TOOL_STEPS)),
    "Wait on the item.",
    [pause],
    max_steps=TOOL_STEPS + 2,
)
