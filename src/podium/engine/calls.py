"""Model and tool calls off the step loop's inlined fast lane: a model call that waits
(timed as a wait) or is retried after a reply it could not make sense of; one tool call
(truncated, screened), or several overlapping, each journaled as it finishes.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Generator
from typing import Any

from podium.agent import Agent
from podium.engine.base import MODEL, TOOLS, eager
from podium.engine.compaction import Compaction
from podium.engine.model_faults import model_fault
from podium.engine.records import ToolOutcome
from podium.engine.replay import RunState
from podium.engine.step import PlannedCall, truncate_result
from podium.engine.stopwatch import Stopwatch
from podium.errors import ModelError, ModelReplyError
from podium.models.base import ModelRequest, ModelResponse
from podium.tools.eager import own_exit, start_eagerly
from podium.tools.executor import ToolResult


class Calls(Compaction):

    async def _call_model(
        self, agent: Agent, request: ModelRequest, sw: Stopwatch, attempt: int = 0
    ) -> ModelResponse:
        """Call the model, asking again (up to ``agent.model_retries``) on a reply it
        could not make sense of; ``attempt`` counts the tries made already."""
        while True:
            if attempt > agent.model_retries:
                raise ModelReplyError(f"{agent.model.name}: no valid reply in {attempt} tries")
            try:
                response, _ = await eager(agent.model.request(request), sw, MODEL)
            except ModelReplyError:
                if attempt >= agent.model_retries:
                    raise
                attempt += 1
                continue
            except (ModelError, OSError):
                raise
            except Exception as exc:  # a bug in the model's code
                raise model_fault(agent.model, exc) from exc
            return response

    async def _model_raised(
        self, agent: Agent, request: ModelRequest, sw: Stopwatch, exc: BaseException
    ) -> ModelResponse:
        """The first slice of a model call the step loop started raised ``exc``: a reply the
        model could not make sense of is asked for again; the model's own bug is its fault
        (:func:`~podium.engine.model_faults.model_fault`); anything else goes on up."""
        if isinstance(exc, ModelReplyError):
            return await self._call_model(agent, request, sw, 1)
        if isinstance(exc, (ModelError, OSError)):
            raise exc
        if isinstance(exc, Exception):  # a bug in the model's code
            raise model_fault(agent.model, exc) from exc
        if isinstance(exc, GeneratorExit):  # the model's own: nothing closes it here
            raise model_fault(agent.model, own_exit(exc)) from exc
        raise exc  # a cancel, an interrupt: not the model's

    @types.coroutine
    def _wait_model(
        self,
        agent: Agent,
        request: ModelRequest,
        sw: Stopwatch,
        first: types.GeneratorType[Any, Any, None],
        pending: Any,
    ) -> Generator[Any, Any, ModelResponse]:
        """The model call started by the step loop (in :meth:`_execute`, through
        :func:`~podium.tools.eager.first_slice`) waits: time the wait, retry a bad reply.
        A generator that drives ``first`` on itself (no coroutine of its own, no
        continuation: a run waiting in its model holds ``first``, the model's coroutine
        and this), its value taken as ``first`` yields it (no StopIteration)."""
        sw.suspend(MODEL)
        try:
            while True:
                try:
                    sent = yield pending
                except GeneratorExit:  # this wait is being closed: so is the model's call
                    first.close()
                    raise
                except BaseException as exc:  # cancellation and errors go into the call
                    try:
                        pending = first.throw(exc)
                    except GeneratorExit as own:  # the model's own, not a closing
                        raise own_exit(own) from own
                else:
                    try:
                        pending = first.send(sent)
                    except GeneratorExit as own:
                        raise own_exit(own) from own
                if first.gi_yieldfrom is None:  # the model's value
                    next(first, None)  # (ends: returns None)
                    response: ModelResponse = pending
                    return response
        except ModelReplyError:
            if agent.model_retries < 1:
                raise
        except (ModelError, OSError):
            raise
        except Exception as exc:  # a bug in the model's code
            raise model_fault(agent.model, exc) from exc
        finally:
            sw.resume(MODEL)
        retried: ModelResponse = yield from self._call_model(agent, request, sw, 1).__await__()
        return retried

    async def _run_one(
        self, agent: Agent, state: RunState, call: PlannedCall, sw: Stopwatch
    ) -> tuple[int, ToolResult]:
        """One call, started eagerly, truncated and screened. (The step loop's fast lane
        inlines the first half: a run waiting in its tool then holds one frame less.)"""
        started = self.executor.start(call.tool, call.args, call.ctx, state.task)
        if isinstance(started, ToolResult):
            result = started
        else:
            sw.suspend(TOOLS)
            try:
                result = await started
            finally:
                sw.resume(TOOLS)
            sw.add_cpu(TOOLS, result.cpu_ns)
            if result.blocked_ns:
                sw.add_blocked(TOOLS, result.blocked_ns)
        result = truncate_result(agent, call.tool, result)
        if agent.screening is not None:  # a screener that waits (a remote classifier) waits
            result, _ = await eager(agent.screening.screen_result(result), sw, TOOLS)
        return call.index, result

    async def _run_tools(
        self,
        agent: Agent,
        state: RunState,
        planned: list[PlannedCall],
        done: dict[int, ToolResult],
        sw: Stopwatch,
    ) -> list[tuple[int, ToolResult]]:
        """Several calls: they overlap, and each outcome is journaled as soon as it is known,
        so a crash mid-step re-runs only the calls still in flight."""
        results = list(done.items())
        todo = [p for p in planned if p.index not in done]
        if not todo:
            return results
        sw.suspend(TOOLS)
        tasks = [asyncio.ensure_future(self._run_journaled(agent, state, c)) for c in todo]
        try:
            gathered = await asyncio.gather(*tasks)
        except BaseException:
            # A failed checkpoint (the store away, or the run taken over) ends this drive:
            # stop the other calls too, so none journals an outcome behind a resumed drive.
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
        sw.resume(TOOLS)
        sw.add_cpu(TOOLS, sum([r.cpu_ns for _, r in gathered]))
        sw.add_blocked(TOOLS, sum([r.blocked_ns for _, r in gathered]))
        results.extend(gathered)
        return results

    async def _run_journaled(
        self, agent: Agent, state: RunState, call: PlannedCall
    ) -> tuple[int, ToolResult]:
        """One of several calls of a step, in a task of its own: run, then journal its outcome.
        (The step's stopwatch is suspended meanwhile: cutting and screening the result here
        on the loop is CPU the call's result reports, with the call's own.)"""
        result = await self.executor.execute(call.tool, call.args, call.ctx)
        began = time.perf_counter_ns()
        result = truncate_result(agent, call.tool, result)
        rest = None
        if agent.screening is not None:  # (a screen that waits: its first slice counts)
            result, rest = start_eagerly(agent.screening.screen_result(result))
        ran = time.perf_counter_ns() - began
        if rest is not None:
            result = await rest
        result.cpu_ns += ran
        await self._append(state, (ToolOutcome(state.step, time.time(), call.index, result),))
        return call.index, result
