"""``GET /v1/models``: the official OpenAI SDK lists the served agents as models."""

from __future__ import annotations

import openai
import pytest

from conftest import KEY_A, ServerProcess

pytestmark = pytest.mark.slow


def test_openai_client_lists_the_served_agents(server: ServerProcess) -> None:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY_A, max_retries=0) as client:
        models = list(client.models.list())
        assert [m.id for m in models] == ["react", "slow", "sleepy"]
        assert all(m.object == "model" and m.owned_by == "podium" for m in models)
        assert all(isinstance(m.created, int) and m.created > 0 for m in models)
        assert client.models.retrieve("slow").id == "slow"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("no-such-agent")
        # What the list names, a chat completion accepts.
        reply = client.chat.completions.create(
            model=models[0].id, messages=[{"role": "user", "content": "q"}]
        )
        assert reply.choices[0].message.content == "42."


def test_listing_models_needs_a_key(server: ServerProcess) -> None:
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="pk_wrong", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.models.list()
