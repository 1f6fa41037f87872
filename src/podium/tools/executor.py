"""Execute tool calls under their policies without ever blocking the event loop.

Async tools start eagerly on the loop (see :mod:`podium.tools.eager`); sync
tools run in a thread pool; ``cpu_bound`` tools in a process pool. Each
attempt is bounded by the tool's timeout; retryable failures back off with
jitter; a circuit breaker short-circuits a failing tool; a semaphore bounds
calls in flight. Every failure becomes a :class:`ToolResult` with ``ok=False``
and a message for the model: tools never crash a run.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import msgspec

from podium.errors import Interrupt
from podium.observe.threadclock import look, split_span
from podium.tools.deadlines import ToolTimeout, arm_deadline, with_deadline
from podium.tools.eager import own_exit
from podium.tools.policy import backoff_delay
from podium.tools.result import ToolResult
from podium.tools.threads import ToolThreads
from podium.tools.tool import Tool, ToolContext

_values = msgspec.structs.astuple

__all__ = ("ToolExecutor", "ToolResult", "render_result")

_encode = msgspec.json.encode
_perf = time.perf_counter_ns


class _First(msgspec.Struct, gc=False):
    """How the first attempt, started inline, went: a value or an error, and the time its
    slices ran on the loop after it first waited (the caller's stopwatch was suspended):
    their CPU and the time they held the loop without running."""

    value: Any
    error: BaseException | None
    ran_ns: int = 0
    blocked_ns: int = 0


def render_result(value: Any) -> str:
    """Tool output as the text the model reads: strings as-is, everything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return _encode(value).decode()


def _call_in_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Any, int]:
    c0 = time.thread_time_ns()
    try:
        value = fn(**kwargs)
    except StopIteration as exc:  # a future cannot carry it: the call would never end
        raise RuntimeError(f"the tool raised StopIteration({exc})") from None
    except GeneratorExit as exc:  # or it would pass for the awaiting coroutine's closing
        raise RuntimeError(f"the tool raised GeneratorExit({exc})") from None
    return value, time.thread_time_ns() - c0


def _call_in_process(module: str, qualname: str, kwargs: dict[str, Any]) -> tuple[Any, int]:
    c0 = time.thread_time_ns()
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    fn = target.fn if isinstance(target, Tool) else target
    try:
        value = fn(**kwargs)
    except StopIteration as exc:  # as in _call_in_thread
        raise RuntimeError(f"the tool raised StopIteration({exc})") from None
    except GeneratorExit as exc:
        raise RuntimeError(f"the tool raised GeneratorExit({exc})") from None
    return value, time.thread_time_ns() - c0


class ToolExecutor:
    """Runs tool calls for every run of an engine.

    ``max_threads`` defaults to the machine's cores × 4 (sync tools mostly
    wait on I/O); a sync call abandoned at its timeout (or its run's deadline)
    keeps its thread, and the pool starts another in its place, up to
    ``max_abandoned`` at once (see :class:`~podium.tools.threads.ToolThreads`), so
    stuck calls cannot starve the others. The process pool starts on first use
    with one process per core.
    """

    def __init__(
        self,
        *,
        thread_pool: Executor | None = None,
        process_pool: Executor | None = None,
        max_threads: int | None = None,
        max_abandoned: int = 64,
    ) -> None:
        self._own_threads = thread_pool is None
        self._threads = thread_pool or ToolThreads(
            max_threads or (os.cpu_count() or 1) * 4, max_abandoned=max_abandoned
        )
        self._own_processes = process_pool is None
        self._processes = process_pool
        self._limits: dict[str, asyncio.Semaphore] = {}
        self.calls = 0
        self.failures = 0
        #: Calls that raised :class:`~podium.errors.Interrupt` (the engine compares this
        #: count around a step's tools instead of looking at every result).
        self.interrupts = 0

    async def execute(
        self, tool: Tool[Any, Any], args: msgspec.Struct, ctx: ToolContext
    ) -> ToolResult:
        """Call ``tool`` with validated ``args`` under its policy; never raises except on cancel.

        For a caller that times the call as a wait: the result's ``cpu_ns`` counts its
        slices on the loop thread as well as CPU off it (in the pools)."""
        begun = _perf()
        look(begun)
        started = self.start(tool, args, ctx)
        inline, blocked = split_span(begun, _perf())  # the slice start() ran inline, if any
        result = started if isinstance(started, ToolResult) else await started
        result.cpu_ns += inline
        result.blocked_ns += blocked
        return result

    def start(
        self,
        tool: Tool[Any, Any],
        args: msgspec.Struct,
        ctx: ToolContext,
        task: asyncio.Task[Any] | None = None,
    ) -> ToolResult | Awaitable[ToolResult]:
        """Start a call: its result if it finished without waiting, else an awaitable of it.

        An async tool with no breaker, limit or sandbox runs its first slice right
        here: most calls end in it, and cost no timer, no task and no loop
        iteration. One that suspends goes on under its timeout (and, if it fails,
        its retries). ``task`` is the calling task, when the caller knows it.

        The caller counts the CPU of that first slice (its stopwatch runs through this
        call) and times the awaitable as a wait: the result's ``cpu_ns`` is the CPU of
        everything after, on the loop thread (the call's later slices, rendering its
        value, its retries) and off it.
        """
        self.calls += 1
        t0 = _perf()
        if not tool.inline:
            return self._execute(tool, args, ctx, t0, None)
        # (positional: the arguments' fields in its parameters' order, no dict to build)
        coro = tool.fn(*_values(args)) if tool.positional else tool.fn(**tool.kwargs(args, ctx))
        try:
            pending = coro.send(None)
        except StopIteration as done:
            value = done.value
            if type(value) is str:
                # (positional: ok, error, attempts, wall_ns; msgspec matches no keywords)
                return ToolResult(ctx.call_id, tool.name, value, True, None, 1, _perf() - t0)
            return self._execute(tool, args, ctx, t0, _First(value, None))
        except GeneratorExit as own:  # the tool's own: nothing is closing it here
            return self._execute(tool, args, ctx, t0, _First(None, own_exit(own)))
        except BaseException as exc:
            if _escapes(exc):
                raise
            return self._execute(tool, args, ctx, t0, _First(None, exc))
        return _continue(self, tool, args, ctx, t0, coro, pending, task)

    async def _execute(
        self,
        tool: Tool[Any, Any],
        args: msgspec.Struct,
        ctx: ToolContext,
        t0: int,
        first: _First | None,
    ) -> ToolResult:
        policy = tool.policy
        breaker = tool.breaker
        if breaker is not None and not breaker.allow():
            self.failures += 1
            return ToolResult(
                ctx.call_id,
                tool.name,
                f"error: tool {tool.name!r} is unavailable (circuit open after repeated "
                f"failures; retry in {breaker.retry_in():.1f}s)",
                ok=False,
                error="circuit_open",
                attempts=0,
            )
        kwargs = tool.kwargs(args, ctx)
        limit = None if policy.max_concurrency is None else self._limit(tool)
        attempt = 0
        cpu_ns = blocked_ns = 0
        failure: tuple[str, str]
        while True:
            try:
                if first is not None:  # the attempt start() ran inline
                    started, first = first, None
                    cpu_ns += started.ran_ns
                    blocked_ns += started.blocked_ns
                    if started.error is not None:
                        raise started.error
                    value, cpu, blocked = started.value, 0, 0
                elif limit is None:
                    value, cpu, blocked = await self._attempt(tool, kwargs)
                else:
                    async with limit:
                        value, cpu, blocked = await self._attempt(tool, kwargs)
                cpu_ns += cpu
                blocked_ns += blocked
            except Interrupt as asked:  # a question for a human: the run waits for the answer
                self.interrupts += 1
                return ToolResult(
                    ctx.call_id,
                    tool.name,
                    asked.question,
                    ok=False,
                    error="interrupted",
                    attempts=attempt + 1,
                    wall_ns=time.perf_counter_ns() - t0,
                    cpu_ns=cpu_ns,
                    blocked_ns=blocked_ns,
                )
            except ToolTimeout:
                failure = (
                    "timeout",
                    f"error: tool {tool.name!r} timed out after {policy.timeout_s}s",
                )
                retryable = policy.retry_on_timeout
            except TimeoutError as exc:  # one inside the tool: say which, not the tool's
                said = policy.without_secrets(str(exc), args) or "a timeout inside it fired"
                failure = ("timeout", f"error: tool {tool.name!r}: {said}")
                retryable = policy.retry_on_timeout
            except BaseException as exc:  # SystemExit too: a CLI's main() made a tool
                if _escapes(exc):
                    raise
                failure = ("exception", policy.without_secrets(_describe(tool, exc), args))
                retryable = isinstance(exc, policy.retry_on)
            else:
                rendering = _perf()  # on the loop, the caller's stopwatch suspended: CPU
                try:
                    content = render_result(value)
                # (a value that holds itself is a RecursionError)
                except (msgspec.EncodeError, TypeError, ValueError, RecursionError) as exc:
                    failure = ("unserializable", _unserializable(tool, value, exc))
                    retryable = False
                else:
                    cpu_ns += _perf() - rendering
                    if breaker is not None:
                        breaker.record_success()
                    return ToolResult(
                        ctx.call_id,
                        tool.name,
                        content,
                        attempts=attempt + 1,
                        wall_ns=time.perf_counter_ns() - t0,
                        cpu_ns=cpu_ns,
                        blocked_ns=blocked_ns,
                    )
            if retryable and attempt < policy.retries:
                await asyncio.sleep(
                    backoff_delay(attempt, policy.backoff_base_s, policy.backoff_max_s)
                )
                attempt += 1
                continue
            if breaker is not None:
                breaker.record_failure()
            self.failures += 1
            kind, message = failure
            if attempt:
                message = f"{message} (after {attempt + 1} attempts)"
            return ToolResult(
                ctx.call_id,
                tool.name,
                message,
                ok=False,
                error=kind,
                attempts=attempt + 1,
                wall_ns=time.perf_counter_ns() - t0,
                cpu_ns=cpu_ns,
                blocked_ns=blocked_ns,
            )

    async def _attempt(
        self, tool: Tool[Any, Any], kwargs: dict[str, Any]
    ) -> tuple[Any, int, int]:
        """One attempt: its value, the CPU it reported and the time it blocked the loop."""
        timeout = tool.policy.timeout_s
        if tool.policy.sandbox is not None:  # a confined process of its own, by reference
            confined = tool.policy.sandbox.call(tool.module or "__main__", tool.qualname, kwargs)
            return await with_deadline(confined, timeout), 0, 0
        if tool.is_async:
            # Its slices run on the loop while the caller's stopwatch is suspended (the call
            # is awaited as a wait): their running time is reported as the call's CPU, the
            # part of a long one the thread did not run as blocked.
            coro = tool.fn(**kwargs)
            start = _perf()
            look(start)
            try:
                pending = coro.send(None)
            except StopIteration as finished:
                return finished.value, *split_span(start, _perf())
            except GeneratorExit as own:  # the tool's own: nothing is closing it here
                raise own_exit(own) from own
            timed = _timed(coro, pending, *split_span(start, _perf()))
            del pending  # (the call's later futures are _timed's: hold not its first one)
            ran: tuple[Any, int, int] = await with_deadline(timed, timeout)
            return ran
        loop = asyncio.get_running_loop()
        if tool.policy.cpu_bound:
            future = loop.run_in_executor(
                self._process_pool(),
                _call_in_process,
                tool.module or "__main__",
                tool.qualname,
                kwargs,
            )
        elif isinstance(self._threads, ToolThreads):
            threads = self._threads
            call = threads.submit(_call_in_thread, tool.fn, kwargs)
            try:
                value, cpu = await with_deadline(asyncio.wrap_future(call), timeout)
            except BaseException:
                threads.abandon(call)  # timed out or cancelled: its thread is replaced
                raise
            return value, cpu, 0
        else:
            future = loop.run_in_executor(self._threads, _call_in_thread, tool.fn, kwargs)
        value, cpu = await with_deadline(future, timeout)
        return value, cpu, 0

    @property
    def abandoned_threads(self) -> int:
        """Sync tool calls left running past their timeout (each holds a thread)."""
        return self._threads.abandoned if isinstance(self._threads, ToolThreads) else 0

    def _limit(self, tool: Tool[Any, Any]) -> asyncio.Semaphore | None:
        n = tool.policy.max_concurrency
        if n is None:
            return None
        sem = self._limits.get(tool.name)
        if sem is None:
            sem = self._limits[tool.name] = asyncio.Semaphore(n)
        return sem

    def _process_pool(self) -> Executor:
        if self._processes is None:
            self._processes = ProcessPoolExecutor(max_workers=os.cpu_count() or 1)
        return self._processes

    def close(self) -> None:
        """Shut down the pools this executor created (not the ones passed in)."""
        if self._own_threads:
            self._threads.shutdown(wait=False, cancel_futures=True)
        if self._own_processes and self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)


def _continue_gen(
    executor: ToolExecutor,
    tool: Tool[Any, Any],
    args: msgspec.Struct,
    ctx: ToolContext,
    t0: int,
    coro: Coroutine[Any, Any, Any],
    pending: Any,
    task: asyncio.Task[Any] | None,
) -> Generator[Any, Any, ToolResult]:
    """Drive an inline-started call that suspended, under its timeout: one generator and
    one deadline entry are all a waiting call holds. A failure goes on in ``_execute``
    (retries, breaker, the error observation) as if its first attempt had failed there.

    (Every name here is a slot in the frame of every waiting call: the values read once are
    not named, and a slice's CPU is added up by :func:`_spent`.)"""
    deadline = None
    if tool.policy.timeout_s is not None:
        task = task or asyncio.current_task()
        assert task is not None, "tool calls run inside an asyncio task"
        deadline = arm_deadline(task, tool.policy.timeout_s)
    # The CPU of its slices on the loop (the caller's stopwatch is suspended), and the time
    # they held it without running.
    ran = blocked = 0
    try:
        try:
            while True:
                failure = None  # (none held while it waits: a traceback holds frames)
                try:
                    sent = yield pending
                except GeneratorExit:  # this call is being closed: so is the tool's coroutine
                    coro.close()
                    raise
                except BaseException as exc:  # cancellation and errors go into the coroutine
                    failure = exc
                start = _perf()
                look(start)
                try:
                    pending = coro.send(sent) if failure is None else coro.throw(failure)
                except GeneratorExit as own:  # raised by the tool, not a closing
                    raise own_exit(own) from own
                finally:
                    ran, blocked = _spent(start, ran, blocked)
        except StopIteration as ended:  # (one name for how it ended: one frame slot)
            if deadline is not None and deadline.fired and task is not None:
                task.uncancel()  # the tool caught its deadline's cancellation and went on
            if type(ended.value) is str:
                return ToolResult(ctx.call_id, tool.name, ended.value, wall_ns=_perf() - t0,
                                  cpu_ns=ran, blocked_ns=blocked)
            first = _First(ended.value, None, ran, blocked)
        except asyncio.CancelledError as ended:
            # Ours if the deadline fired and nothing else cancelled the task meanwhile.
            if deadline is not None and deadline.fired and task is not None:
                if task.uncancel():
                    raise
                first = _First(None, ToolTimeout(), ran, blocked)
            elif _escapes(ended):
                raise
            else:
                first = _First(None, ended, ran, blocked)
        except BaseException as ended:
            if deadline is not None and deadline.fired and task is not None:
                task.uncancel()  # the tool caught its deadline's cancellation, then failed
            if _escapes(ended):
                raise
            first = _First(None, ended, ran, blocked)
    finally:
        failure = None  # (not held over the retries: a traceback holds frames)
        if deadline is not None:
            deadline.disarm()
    return (yield from executor._execute(tool, args, ctx, t0, first).__await__())


def _spent(start: int, ran: int, blocked: int) -> tuple[int, int]:
    """``ran`` and ``blocked`` plus the CPU and blocked time of the slice that began at
    ``start`` and ends now (see :func:`~podium.observe.threadclock.split_span`)."""
    cpu, off = split_span(start, _perf())
    return ran + cpu, blocked + off


_continue = types.coroutine(_continue_gen)


@types.coroutine
def _timed(
    coro: Coroutine[Any, Any, Any], pending: Any, ran: int, blocked: int
) -> Generator[Any, Any, tuple[Any, int, int]]:
    """Drive ``coro``, which yielded ``pending`` once, to its end: its value, ``ran`` plus
    the CPU of its slices on the loop, ``blocked`` plus the time they held it without
    running. (What it raises goes up as it is.)"""
    sent: Any = None
    while True:
        failure = None  # (none held while it waits: a traceback holds frames)
        try:
            sent = yield pending
        except GeneratorExit:  # closed: so is the tool's coroutine
            coro.close()
            raise
        except BaseException as exc:  # cancellation and errors go into the coroutine
            failure = exc
        start = _perf()
        look(start)
        try:
            pending = coro.send(sent) if failure is None else coro.throw(failure)
        except StopIteration as stop:
            cpu, off = split_span(start, _perf())
            return stop.value, ran + cpu, blocked + off
        except GeneratorExit as own:
            raise own_exit(own) from own
        cpu, off = split_span(start, _perf())
        ran += cpu
        blocked += off


def _describe(tool: Tool[Any, Any], exc: BaseException) -> str:
    return f"error: tool {tool.name!r} failed: {type(exc).__name__}: {exc}"


def _escapes(exc: BaseException) -> bool:
    """Whether what a tool call raised goes on up instead of becoming its failure: Ctrl-C,
    a coroutine being closed, or a cancellation of the task running the call. Everything
    else a tool raises is its failure, ``SystemExit`` and a cancellation it raised itself
    (awaiting a task it had cancelled) included: one tool cannot stop a worker. (A
    ``GeneratorExit`` the tool raised itself reaches here as a ``RuntimeError``: see
    :func:`~podium.tools.eager.own_exit`.)"""
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is None or task.cancelling() > 0
    return isinstance(exc, (KeyboardInterrupt, GeneratorExit))


def _unserializable(tool: Tool[Any, Any], value: Any, exc: BaseException) -> str:
    if inspect.iscoroutine(value):
        value.close()  # never to be awaited: closed here, without a "never awaited" warning
        return f"error: tool {tool.name!r} returned a coroutine it did not await (a tool bug)"
    return (
        f"error: tool {tool.name!r} returned a {type(value).__name__}, which cannot be sent "
        f"as JSON ({exc})"
    )
