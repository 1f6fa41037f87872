"""An agent on a real model: any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp,
Ollama, OpenAI itself), chosen by the usual environment variables.

    podium sim-server &                               # or vLLM, Ollama…, on :8000
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 PODIUM_MODEL=podium-sim \\
        podium run podium.examples.openai_endpoint:agent "What time is it in Paris?"

``OPENAI_BASE_URL`` (default: ``http://127.0.0.1:8000/v1``, where ``podium
sim-server`` and ``vllm serve`` listen), ``OPENAI_API_KEY`` (sent as a bearer
token when set) and ``PODIUM_MODEL`` (the model id the server serves, default
``podium-sim``). The same agent, declared in TOML without Python, is
``examples/openai-endpoint/podium.toml``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from podium import Agent, tool

__all__ = ("agent", "utc_offset_now")

LOCAL_BASE_URL = "http://127.0.0.1:8000/v1"

_OFFSETS = {"paris": 1, "london": 0, "new york": -5, "tokyo": 9, "sydney": 10}


@tool(timeout=2.0)
def utc_offset_now(city: str) -> str:
    """The current time in a city (standard time; a handful of cities are known).

    Args:
        city: The city, e.g. "Paris".
    """
    hours = _OFFSETS.get(city.strip().lower())
    if hours is None:
        return f"unknown city {city!r}; known: {', '.join(sorted(_OFFSETS))}"
    now = datetime.now(UTC) + timedelta(hours=hours)
    return f"{city}: {now:%H:%M} (UTC{hours:+d})"


def agent() -> Agent:
    """The agent, on the endpoint the environment names (read when the agent is made)."""
    from podium.models import OpenAIChatModel

    model = OpenAIChatModel(
        os.environ.get("OPENAI_BASE_URL") or LOCAL_BASE_URL,
        os.environ.get("PODIUM_MODEL") or "podium-sim",
        api_key=os.environ.get("OPENAI_API_KEY") or None,
    )
    return Agent(
        "assistant",
        model,
        "You answer questions about the time in cities. Use the utc_offset_now tool.",
        [utc_offset_now],
        max_steps=8,
        deadline_s=120,
    )
