"""Every server's refusals, from the captures in ``tests/fixtures/backends``: context
overflows typed as :class:`ModelContextLengthError` whatever the words, and client errors
never retried nor failed over, whatever status carries them."""

from __future__ import annotations

import pytest
from backend_servers import FIXTURES, ReplayServer, Reply, fixture_bytes

from podium.errors import ModelContextLengthError, ModelError, ModelHTTPError, ModelReplyError
from podium.messages import Message
from podium.models import ModelRequest, OpenAIChatModel, RetryPolicy
from podium.models.openai_errors import http_error
from podium.models.openai_wire import StreamAssembler
from podium.models.pool import Backend, BackendPool

pytestmark = pytest.mark.anyio

CONTEXT_CAPTURES = sorted(p.name for p in FIXTURES.glob("*_context_*.json"))


def _status(name: str) -> int:
    return int(name.rsplit("_", 1)[1].removesuffix(".json"))


def test_the_captures_cover_every_server() -> None:
    servers = {"vllm", "sglang", "llamacpp", "llama_cpp_python", "ollama", "tgi"}
    assert {n.split("_context_")[0].removesuffix("_decoder_prompt").removesuffix("_native")
            for n in CONTEXT_CAPTURES} == servers


@pytest.mark.parametrize("name", CONTEXT_CAPTURES)
def test_every_context_length_capture_is_typed_as_one(name: str) -> None:
    err = http_error(_status(name), fixture_bytes(name))
    assert isinstance(err, ModelContextLengthError), (name, err.message)
    assert err.invalid_request


@pytest.mark.parametrize(
    ("name", "status"),
    [*((n, _status(n)) for n in CONTEXT_CAPTURES),
     ("llama_cpp_python_unknown_tool_500.json", 500)],
)
async def test_client_errors_are_never_retried_nor_failed_over(
    replay_factory: object, name: str, status: int
) -> None:
    servers: list[ReplayServer] = [await replay_factory() for _ in range(2)]  # type: ignore[operator]
    for s in servers:
        s.default = Reply(status=status, body=fixture_bytes(name))
    retry = RetryPolicy(attempts=4, backoff_s=0.001)
    pool = BackendPool(
        [Backend(OpenAIChatModel(s.base_url, "m", retry=retry), name=f"b{i}")
         for i, s in enumerate(servers)]
    )
    async with pool:
        with pytest.raises(ModelHTTPError) as caught:
            await pool.request(ModelRequest([Message("user", "hi")]))
    assert caught.value.invalid_request
    assert sum(len(s.requests) for s in servers) == 1  # once: not again, not elsewhere
    assert [b.state for b in pool.backends] == ["healthy", "healthy"]
    assert pool.failovers == 0
    for b in pool.backends:
        assert b.model.breaker.statistics().state == "closed"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("chunk", "kind"),
    [
        (b'{"error":"prompt too long; exceeded max context length by 9 tokens"}',
         ModelContextLengthError),
        (b'{"error":{"message":"Invalid tool_choice: lookup is not among the tools"}}',
         ModelHTTPError),
        (b'{"error":"model runner has unexpectedly stopped"}', ModelReplyError),
    ],
)
def test_an_error_in_a_stream_is_typed_by_its_words(chunk: bytes, kind: type) -> None:
    asm = StreamAssembler(backend="ollama@h:1")
    with pytest.raises(ModelError) as caught:
        asm.feed(chunk, 0.0)
    assert type(caught.value) is kind
    if isinstance(caught.value, ModelHTTPError):
        assert caught.value.invalid_request  # the engine does not ask again
