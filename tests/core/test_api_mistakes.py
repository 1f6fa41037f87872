"""What a clumsy user of the Python API hits: refused where the mistake is made, with one
clear error naming the thing and what to write instead; a mistake that can only show at
run time ends the run the documented way (a failed tool result, a failed run), never a
traceback from inside the engine, a hang, or a worker taken down."""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
import types
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _helpers import args, ctx, lookup, tool_messages

from podium import (
    Agent,
    ConfigError,
    ContextPolicy,
    Engine,
    FunctionModel,
    MemoryRunStore,
    Model,
    ModelRequest,
    ModelResponse,
    Scenario,
    SimulatedModel,
    ToolContext,
    tool,
    tool_call_reply,
)
from podium.errors import ToolDefinitionError
from podium.messages import Message, ToolCall
from podium.store.sqlite import SQLiteRunStore
from podium.tools import ToolExecutor, ToolResult

anyio = pytest.mark.anyio

_MODEL = FunctionModel(lambda messages, request: "ok")


def _calling(name: str) -> tuple[FunctionModel, list[str]]:
    """A model that calls tool ``name`` once, then answers "done"; and the tool results it read."""
    read: list[str] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply((name, "{}"))
        read.extend(m.content for m in tool_messages(messages))
        return "done"

    return FunctionModel(reply), read


def _by_kwargs(kwargs: dict[str, Any], says: str) -> Any:
    """A case named after what it passes: ``max_steps=2.5``."""
    return pytest.param(kwargs, says, id=",".join(f"{k}={_short(v)}" for k, v in kwargs.items()))


def _short(value: object) -> str:
    if value is None or isinstance(value, (str, int, float)):
        return repr(value)
    return value.__name__ if isinstance(value, type) else type(value).__name__


def _by_maker(make: Callable[[], object], says: str) -> Any:
    return pytest.param(make, says, id=make.__name__.strip("_"))


# -- @tool: what cannot become a tool is refused at the decorator ------------------------------


class _Order:
    """Not a function."""

    def status(self, order_id: str) -> str:
        """A method, decorated where it is defined (``self`` is no argument for the model)."""
        return order_id


def _add(a: int, b: int) -> int:
    """Add."""
    return a + b


def _a_class() -> object:
    return tool(_Order)


def _a_partial() -> object:
    return tool(functools.partial(_add, b=1))


def _a_string() -> object:
    return tool("lookup")  # type: ignore[call-overload]


class _Callable:
    def __call__(self, x: int) -> int:
        return x


def _a_callable_object() -> object:
    return tool(_Callable())


def _a_generator() -> object:
    @tool
    def pages(n: int) -> Iterator[int]:
        """Pages."""
        yield n

    return pages


def _an_async_generator() -> object:
    @tool
    async def pages(n: int) -> Any:
        """Pages."""
        yield n

    return pages


def _positional_only() -> object:
    @tool
    def double(x: int, /) -> int:
        """Double."""
        return 2 * x

    return double


def _method_in_class() -> object:
    return tool(_Order.status)


class _Custom:
    pass


def _custom_annotation() -> object:
    @tool
    def use(x: _Custom) -> str:
        """Use."""
        return "x"

    return use


def _function_default() -> object:
    @tool
    def use(x: int = lambda: 1) -> str:  # type: ignore[assignment]
        """Use."""
        return "x"

    return use


@pytest.mark.parametrize(
    ("make", "says"),
    [
        _by_maker(_a_class, "not the class _Order"),
        _by_maker(_a_partial, "functools.partial"),
        _by_maker(_a_string, "not str 'lookup'"),
        _by_maker(_a_callable_object, 'decorate its method instead, e.g. tool(name="...")'),
        _by_maker(_a_generator, "is a generator"),
        _by_maker(_an_async_generator, "is a generator"),
        _by_maker(_positional_only, "'x' is positional-only"),
        _by_maker(_method_in_class, "tool(obj.method)"),
        _by_maker(_custom_annotation, "parameter 'x': type _Custom has no JSON Schema"),
        _by_maker(_function_default, "parameter 'x': its default"),
    ],
)
def test_what_cannot_be_a_tool_is_refused_at_the_decorator(
    make: Callable[[], object], says: str
) -> None:
    with pytest.raises(ToolDefinitionError, match=f".*{_escape(says)}"):
        make()


def _escape(text: str) -> str:
    return re.escape(text)


def test_a_wrapped_function_is_still_a_tool() -> None:
    @tool
    @functools.cache
    def square(x: int) -> int:
        """Square a number."""
        return x * x

    assert (square.name, square.description) == ("square", "Square a number.")
    assert square.parameters["required"] == ["x"]


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"secret_args": ("pasword",)}, ToolDefinitionError, "'pasword', which is not a param"),
        ({"secret_args": "b"}, ConfigError, "secret_args=('b',)"),
        ({"breaker": True}, ConfigError, "not a bool"),
        ({"timeout": math.nan}, ConfigError, "timeout_s must be positive"),
        ({"max_result_tokens": 0}, ConfigError, "max_result_tokens must be >= 1"),
        # A caller without type checking: Python's own TypeError, or a silent misreading.
        ({"timeout": "5"}, ConfigError, "timeout_s must be a number of seconds or None, got '5'"),
        ({"retries": 1.5}, ConfigError, "retries must be a whole number, got 1.5"),
        ({"name": 123}, ToolDefinitionError, "tool name 123: a str, not int"),
        ({"description": 5}, ToolDefinitionError, "tool description 5: a str, not int"),
    ],
    ids=["misspelt-secret", "secret-as-str", "breaker-true", "timeout-nan", "no-result-tokens",
         "timeout-str", "retries-float", "name-int", "description-int"],
)
def test_tool_options_that_would_be_ignored_or_misread_are_refused(
    options: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=_escape(says)):
        tool(**options)(_add)


@anyio
async def test_an_optional_tool_context_is_the_runs_not_the_models() -> None:
    @tool
    async def where(order_id: str, ctx: ToolContext | None = None) -> str:
        """Where an order is."""
        return f"{order_id} @ {ctx.idempotency_key if ctx else 'no context'}"

    assert list(where.parameters["properties"]) == ["order_id"]
    seen: list[str] = []

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("where", '{"order_id": "A-1"}'))
        seen.extend(m.content for m in tool_messages(messages))
        return "done"

    record = await Agent("a", FunctionModel(reply), "", [where]).run("go", run_id="r1")
    assert record.status == "completed"
    assert seen == ["A-1 @ r1:0:0"]


# -- what tools raise or return at run time ---------------------------------------------------


class _LibraryStop(BaseException):
    """A BaseException of some library (a test framework's skip, a green-thread timeout)."""


def _cancelled_inside() -> None:
    raise asyncio.CancelledError  # as awaiting a task the tool itself cancelled does


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        (lambda: _sys_exit(2), "SystemExit: 2"),
        (lambda: _raise(_LibraryStop("stop")), "_LibraryStop: stop"),
        (_cancelled_inside, "CancelledError"),
        (lambda: _raise(GeneratorExit("bye")), "GeneratorExit(bye)"),
        (lambda: _raise(StopIteration("end")), "StopIteration"),
        (lambda: _raise(StopAsyncIteration("end")), "StopAsyncIteration: end"),
    ],
    ids=[
        "sys-exit",
        "base-exception",
        "own-cancellation",
        "generator-exit",
        "stop-iteration",
        "stop-async-iteration",
    ],
)
@pytest.mark.parametrize("kind", ["async", "async-suspending", "async-limited", "sync"])
@anyio
async def test_a_base_exception_from_a_tool_is_its_failure_not_the_workers(
    raised: Callable[[], None], says: str, kind: str
) -> None:
    model, read = _calling("fail")
    store = MemoryRunStore()
    async with Engine(store) as engine:
        record = await engine.run(Agent("a", model, "", [_failing(kind, raised)]), "go")
    assert (record.status, record.output) == ("completed", "done")
    [result] = read
    assert result.startswith("error: tool 'fail' failed: ")
    assert says in result
    stored = await store.get(record.run_id)
    assert stored is not None and stored.status == "completed"  # not left "running"


def _sys_exit(code: int) -> None:
    raise SystemExit(code)  # what a CLI's main() wrapped as a tool does on bad arguments


def _raise(exc: BaseException) -> None:
    raise exc


def _failing(kind: str, raised: Callable[[], None]) -> Any:
    if kind == "sync":

        def fail() -> str:
            """Fail."""
            raised()
            return "unreachable"

        return tool(fail)

    async def fail_async() -> str:
        """Fail."""
        if kind != "async":
            await asyncio.sleep(0)
        raised()
        return "unreachable"

    # A concurrency limit takes the call off the inline path: started in an attempt of its own.
    limit = 1 if kind == "async-limited" else None
    return tool(name="fail", max_concurrency=limit)(fail_async)


@types.coroutine
def _suspend() -> Generator[None, None, None]:
    yield


@anyio
async def test_a_tool_call_being_closed_closes_the_tool_instead_of_failing_it() -> None:
    closed: list[bool] = []

    @tool
    async def waits() -> str:
        """Waits."""
        try:
            await _suspend()
        finally:
            closed.append(True)
        return "unreachable"

    executor = ToolExecutor()
    call = executor.start(waits, args(waits), ctx())
    assert not isinstance(call, ToolResult)
    waiting: Any = call
    waiting.send(None)
    waiting.close()  # as the collector closes a call whose task was dropped
    assert closed == [True]
    assert executor.failures == 0  # the closing went through, not taken for a failure
    executor.close()


def test_ctrl_c_in_a_tool_still_stops_the_program() -> None:
    @tool
    async def interrupted() -> str:
        """Interrupted."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ToolExecutor().start(interrupted, args(interrupted), ctx())


@anyio
async def test_a_sync_tool_raising_stop_iteration_fails_at_once() -> None:
    @tool(timeout=5)
    def next_page() -> str:
        """The next page."""
        return next(iter(()))  # type: ignore[no-any-return]

    model, read = _calling("next_page")
    agent = Agent("a", model, "", [next_page])
    record = await asyncio.wait_for(agent.run("go"), 3)  # not at the tool's timeout
    assert record.status == "completed"
    [result] = read
    assert "StopIteration" in result


class _Point:
    pass


async def _later() -> int:
    return 1


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (_Point, "returned a _Point, which cannot be sent as JSON"),
        (_later, "returned a coroutine it did not await"),
    ],
    ids=["object", "coroutine"],
)
@anyio
async def test_a_result_json_cannot_hold_says_what_the_tool_returned(
    value: Callable[[], object], says: str
) -> None:
    @tool
    def make() -> Any:
        """Make."""
        return value()

    model, read = _calling("make")
    record = await Agent("a", model, "", [make]).run("go")
    assert record.status == "completed"
    [result] = read
    assert says in result  # and no "coroutine never awaited" warning (an error here)


# -- Agent(...) -------------------------------------------------------------------------------


class _SyncRequest(Model):
    def request(self, request: ModelRequest) -> ModelResponse:  # type: ignore[override]
        return ModelResponse(content="forgot async")


_HELPER = Agent("helper", _MODEL, "Helps.")


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        _by_kwargs({"tools": lookup}, "tools takes a list: tools=[lookup]"),
        _by_kwargs({"tools": None}, "tools takes a list of tools, not NoneType"),
        _by_kwargs({"tools": {"lookup": lookup}}, "tools takes a list of tools, not dict"),
        _by_kwargs({"tools": [_HELPER]}, "pass helper.as_tool()"),
        _by_kwargs({"instructions": None}, "instructions must be a string, not NoneType"),
        _by_kwargs({"instructions": [lookup]}, "tools go in tools=[...]"),
        _by_kwargs({"name": ""}, "an agent's name is a non-empty string"),
        _by_kwargs({"model": "gpt-4o"}, "OpenAIChatModel(base_url, 'gpt-4o')"),
        _by_kwargs({"model": SimulatedModel}, "pass an instance, SimulatedModel(...)"),
        _by_kwargs({"model": lambda messages, request: "ok"}, "FunctionModel(fn)"),
        _by_kwargs({"model": _SyncRequest()}, "_SyncRequest.request must be an async def"),
        _by_kwargs({"max_steps": 2.5}, "max_steps must be a whole number of at least 1, not 2.5"),
        _by_kwargs({"max_steps": None}, "max_steps must be a whole number of at least 1, not None"),
        _by_kwargs({"model_retries": -1}, "model_retries must be a whole number of at least 0"),
        _by_kwargs({"max_invalid_tool_calls": -1}, "max_invalid_tool_calls must be a whole number"),
        _by_kwargs({"deadline_s": "60"}, "deadline_s must be positive seconds"),
        _by_kwargs({"tags": "prod"}, "tags=['prod']"),
        _by_kwargs({"tags": None}, "tags takes a list of strings, got None"),
        _by_kwargs({"context": {"max_context_tokens": 1000}}, "context takes a ContextPolicy(...)"),
        _by_kwargs({"settings": {"temperature": 0}}, "settings takes a ModelSettings(...)"),
        _by_kwargs({"screening": True}, "screening takes a ScreeningPolicy(...)"),
        _by_kwargs({"handoffs": _HELPER}, "handoffs takes a list of agents"),
    ],
)
def test_agent_mistakes_are_refused_at_construction(kwargs: dict[str, Any], says: str) -> None:
    given: dict[str, Any] = {"name": "support", "model": _MODEL, "instructions": "Help.", **kwargs}
    with pytest.raises(ConfigError, match=_escape(says)):
        Agent(**given)


def test_tools_given_as_a_generator_are_all_kept() -> None:
    agent = Agent("a", _MODEL, "", (t for t in [lookup]))
    assert list(agent.tools) == ["lookup"]
    assert [t.name for t in agent.prefix.tools] == ["lookup"]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"compaction": "llm"}, "compaction must be 'model' or 'extractive', not 'llm'"),
        ({"summary_max_tokens": 0}, "summary_max_tokens must be at least 1"),
    ],
    ids=["compaction", "summary-tokens"],
)
def test_context_policy_mistakes_are_refused(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=_escape(says)):
        ContextPolicy(**kwargs)


# -- the test doubles -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "says"),
    [
        ("ok", "FunctionModel takes a function fn(messages, request), not 'ok'"),
        (lambda messages: "ok", "<lambda>(messages) cannot take those two arguments"),
    ],
    ids=["not-callable", "one-argument"],
)
def test_a_reply_function_that_cannot_be_called_is_refused(fn: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=_escape(says)):
        FunctionModel(fn)


@pytest.mark.parametrize("reply", [None, {"content": "hi"}], ids=["none", "dict"])
@anyio
async def test_a_reply_function_returning_neither_str_nor_response_fails_the_run(
    reply: object,
) -> None:
    def fn(messages: Sequence[Message], request: ModelRequest) -> Any:
        return reply

    agent = Agent("a", FunctionModel(fn, name="mine"), "")
    async with Engine() as engine:
        record = await engine.run(agent, "go")
    assert (record.status, record.reason) == ("failed", "model_error")
    assert record.error is not None
    assert f"mine: the reply function returned {reply!r}; return a str" in record.error


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (ModelResponse(tool_calls=(ToolCall("c0", "lookup", {"q": "x"}),)),  # type: ignore[arg-type]
         "tool_calls[0].arguments is dict, not str (JSON text: json.dumps it)"),
        (ModelResponse(tool_calls=(ToolCall("c0", None, "{}"),)),  # type: ignore[arg-type]
         "tool_calls[0].name is NoneType, not str"),
        (ModelResponse(tool_calls=({"name": "lookup"},)),  # type: ignore[arg-type]
         "tool_calls[0] is dict, not ToolCall(id, name, arguments)"),
        (ModelResponse(content=5), "content is int, not str"),  # type: ignore[arg-type]
    ],
    ids=["arguments-dict", "name-none", "call-dict", "content-int"],
)
@anyio
async def test_a_reply_with_fields_of_the_wrong_types_fails_the_run_saying_which(
    reply: ModelResponse, says: str
) -> None:
    """Found from the outside: each raised a TypeError or AttributeError out of run(), and
    the run stayed ``running`` for good."""
    class Mine(Model):  # a custom model, its reply as it made it
        name = "mine"

        async def request(self, request: ModelRequest) -> ModelResponse:
            return reply

    agent = Agent("a", Mine(), "", [lookup])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        stored = await engine.store.get(record.run_id)
    assert (record.status, record.reason) == ("failed", "model_error")
    assert record.error is not None and f"mine: its reply is malformed: {says}" in record.error
    assert stored is not None and stored.status == "failed"


def test_tool_call_reply_takes_a_dict_and_refuses_what_is_neither() -> None:
    reply = tool_call_reply(("lookup", {"q": "x"}), ("lookup", '{"q": "y"}'))
    assert [c.arguments for c in reply.tool_calls] == ['{"q":"x"}', '{"q": "y"}']
    with pytest.raises(TypeError, match="the arguments of 'lookup' are NoneType"):
        tool_call_reply(("lookup", None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"give \(name, arguments\)"):
        tool_call_reply("lookup")  # type: ignore[arg-type]


def test_a_cpu_bound_tool_that_another_process_cannot_import_is_refused() -> None:
    def double(x: int) -> int:
        """Double.

        Args:
            x: A number.
        """
        return 2 * x

    with pytest.raises(ToolDefinitionError, match=r"define .*'double' at module level"):
        tool(cpu_bound=True)(double)


def test_memory_tools_over_a_run_store_is_refused_with_the_wrapper() -> None:
    from podium.memory import memory_tools

    with pytest.raises(ConfigError, match=r"not MemoryRunStore \(a run store: wrap it"):
        memory_tools(MemoryRunStore())  # type: ignore[arg-type]


@anyio
async def test_a_tool_result_that_holds_itself_is_an_observation() -> None:
    @tool
    def loop() -> Any:
        """Return a dict that holds itself."""
        d: dict[str, Any] = {}
        d["self"] = d
        return d

    model, read = _calling("loop")
    record = await Agent("a", model, "", [loop]).run("go")
    assert record.status == "completed"
    [result] = read
    assert "returned a dict, which cannot be sent as JSON" in result


def test_simulated_model_mistakes_are_refused() -> None:
    with pytest.raises(ConfigError, match="a fixed answer: SimulatedModel"):
        SimulatedModel("hello")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="steps are SimStep"):
        Scenario(steps=({"tool_calls": []},))  # type: ignore[arg-type]


# -- Engine -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"store": "runs.sqlite"}, "Engine(SQLiteRunStore('runs.sqlite'))"),
        ({"store": Path("runs.sqlite")}, "Engine(SQLiteRunStore('runs.sqlite'))"),
        ({"store": MemoryRunStore}, "pass an instance, MemoryRunStore(...)"),
        ({"executor": object()}, "is not a ToolExecutor"),
    ],
    ids=["store-str", "store-path", "store-class", "executor"],
)
def test_engine_parts_of_the_wrong_kind_are_refused(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=_escape(says)):
        Engine(**kwargs)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        _by_kwargs({"agent": "support"}, "'support' is not an Agent"),
        _by_kwargs({"user_input": None}, "the user's message as a string, not NoneType"),
        _by_kwargs({"user_input": [{"role": "user", "content": "hi"}]}, "string, not list"),
        _by_kwargs({"run_id": 123}, "run_id must be a string"),
        _by_kwargs({"tenant": ""}, "tenant must be a non-empty string"),
        _by_kwargs({"tenant": None}, "tenant must be a non-empty string"),
        _by_kwargs({"deadline_s": 0}, "deadline_s must be positive seconds"),
        _by_kwargs({"deadline_s": -1}, "deadline_s must be positive seconds"),
        _by_kwargs({"deadline_s": math.nan}, "deadline_s must be positive seconds"),
        _by_kwargs({"deadline_s": "10"}, "deadline_s must be positive seconds"),
    ],
)
@anyio
async def test_a_run_with_wrong_arguments_is_refused_before_it_is_stored(
    call: dict[str, Any], says: str
) -> None:
    given: dict[str, Any] = {"agent": Agent("a", _MODEL, ""), "user_input": "hi", **call}
    agent, text = given.pop("agent"), given.pop("user_input")
    store = MemoryRunStore()
    async with Engine(store) as engine:
        with pytest.raises(ConfigError, match=_escape(says)):
            await engine.run(agent, text, **given)
    assert await store.list() == []


def test_a_sqlite_store_on_a_directory_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        SQLiteRunStore(tmp_path)


def test_a_sqlite_store_serves_one_asyncio_run_after_another(tmp_path: Path) -> None:
    # A script's habit: asyncio.run(...) for each thing it does, with one store and engine.
    store = SQLiteRunStore(os.fspath(tmp_path / "runs.sqlite"))
    engine = Engine(store)
    agent = Agent("a", _MODEL, "")
    first = asyncio.run(engine.run(agent, "one"))
    second = asyncio.run(asyncio.wait_for(engine.run(agent, "two"), 5))
    assert (first.status, second.status) == ("completed", "completed")
    asyncio.run(store.aclose())


class _Buggy(Model):
    """A custom model with a bug: raises ``exc``, or returns ``reply`` (not a ModelResponse),
    at once or after waiting (another path through the engine); ``stream`` for the path of
    a run someone listens to."""

    def __init__(
        self, exc: BaseException | None = None, reply: object = None, *, wait: bool = False
    ) -> None:
        self.name = "buggy"
        self.exc, self.reply, self.wait = exc, reply, wait

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.wait:
            await asyncio.sleep(0.001)
        if self.exc is not None:
            raise self.exc
        return self.reply  # type: ignore[return-value]


@pytest.mark.parametrize("wait", [False, True], ids=["at-once", "after-waiting"])
@pytest.mark.parametrize(
    ("model", "says"),
    [
        (lambda wait: _Buggy(KeyError("choices"), wait=wait), "buggy raised KeyError: 'choices'"),
        (lambda wait: _Buggy(reply="hello", wait=wait), "buggy: request() returned str 'hello'"),
        (lambda wait: _Buggy(reply=None, wait=wait), "buggy: request() returned NoneType None"),
        (
            lambda wait: _Buggy(GeneratorExit("bye"), wait=wait),
            "buggy raised RuntimeError: coroutine raised GeneratorExit(bye)",
        ),
    ],
    ids=["raises", "returns-str", "returns-none", "raises-generator-exit"],
)
@anyio
async def test_a_model_with_a_bug_fails_its_run_instead_of_leaving_it_running(
    model: Callable[[bool], Model], says: str, wait: bool, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent("a", model(wait), "")
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        stored = await engine.store.get(record.run_id)
    assert (record.status, record.reason) == ("failed", "model_error")
    assert record.error is not None and says in record.error, record.error
    assert stored is not None and stored.status == "failed"  # not left "running"
    if "raised" in says:  # the bug's traceback is in the log (its frames; the message,
        # which may carry a secret, only in the run's error, scrubbed)
        logged = [r.getMessage() for r in caplog.records if r.name == "podium.engine"]
        assert any("(message in the run's error)" in m for m in logged), logged
        if "KeyError" in says:
            assert any(", in request" in m and "File " in m for m in logged), logged
            assert not any("choices" in m for m in logged), logged


@anyio
async def test_a_reply_function_that_raises_fails_its_run() -> None:
    def reply(messages: Sequence[Message], request: ModelRequest) -> str:
        return {"a": 1}["b"]  # type: ignore[no-any-return]

    async with Engine() as engine:
        record = await engine.run(Agent("a", FunctionModel(reply, name="fn"), ""), "go")
    assert (record.status, record.reason, record.error) == (
        "failed", "model_error", "ModelError: fn raised KeyError: 'b'"
    )


@anyio
async def test_a_streaming_model_with_a_bug_fails_its_run() -> None:
    from podium.models.base import StreamDelta
    from podium.streaming import LocalTokenChannel

    class BuggyStream(_Buggy):
        async def stream(self, request: ModelRequest) -> Any:  # type: ignore[override]
            yield StreamDelta(content="hel")
            raise ValueError("bad chunk")

    agent = Agent("a", BuggyStream(), "")
    channel = LocalTokenChannel()
    async with Engine() as engine:
        engine.tokens = channel
        record = await engine.create(agent, "go")
        listener = await channel.subscribe(record.run_id)
        try:
            done = await engine.execute(agent, record)
        finally:
            listener.close()
    assert (done.status, done.reason) == ("failed", "model_error")
    assert done.error is not None and "buggy raised ValueError: bad chunk" in done.error


@anyio
async def test_a_model_whose_service_is_away_still_raises_for_the_worker_to_wait_out() -> None:
    # An OSError is a service away, not a bug: the worker backs off and resumes the run.
    agent = Agent("a", _Buggy(ConnectionRefusedError("down")), "")
    async with Engine() as engine:
        with pytest.raises(ConnectionRefusedError):
            await engine.run(agent, "go")
