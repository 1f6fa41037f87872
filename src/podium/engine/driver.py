"""The async driver: :class:`Engine`, which performs a run's I/O around the sans-I/O step
logic, and times it.

One coroutine per run; a step is ``assemble → model → parse → tools → merge →
checkpoint``. Awaited work starts eagerly, so calls that do not really wait
(an instant tool, an in-memory store) cost no loop iteration and are timed
exactly; calls that wait are timed as wall time, CPU counted only over the
slices that ran on this run's behalf.

``Engine`` is built from layers, one module each (see "Engine rooms" in
docs/architecture.md and podium.engine.base): this module holds only its parts and
their closing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from podium.engine.base import Observer
from podium.engine.hook import EngineHook
from podium.engine.loop import StepLoop
from podium.engine.profile import ProfileAggregator
from podium.engine.runids import new_run_id
from podium.engine.stopwatch import CpuClock, NoStopwatch, SampledStopwatch, Stopwatch, cpu_clock
from podium.errors import ConfigError
from podium.lifecycle import AsyncCloseable
from podium.models.base import Model
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.streaming.base import TokenChannel
from podium.tools.executor import ToolExecutor

__all__ = ("Engine", "Observer", "new_run_id")


def _check_parts(store: object, executor: object) -> None:
    """Refuse at ``Engine(...)`` what would fail at its first run."""
    if store is not None and not isinstance(store, RunStore):
        if isinstance(store, (str, os.PathLike)):
            hint = f"a file is a store once opened: Engine(SQLiteRunStore({str(store)!r}))"
        elif isinstance(store, type):
            hint = f"pass an instance, {store.__name__}(...), not the class"
        else:
            hint = "pass a MemoryRunStore, SQLiteRunStore or RedisRunStore"
        raise ConfigError(f"Engine(store={store!r}) is not a RunStore: {hint}")
    if executor is not None and not isinstance(executor, ToolExecutor):
        raise ConfigError(
            f"Engine(executor={executor!r}) is not a ToolExecutor: to bring your own pool, "
            "pass ToolExecutor(thread_pool=...)"
        )


class Engine(StepLoop, AsyncCloseable):
    """Runs agents: creates runs in a store, drives their steps, resumes them after a crash.

    Example::

        async with Engine(SQLiteRunStore("runs.sqlite")) as engine:
            record = await engine.run(agent, "Where is order A-1?")
            print(record.output, record.profile)

    The workload profile is on by default. ``clock`` says how its CPU figures are
    taken: ``"sampled"`` (the default) estimates each phase's CPU as its running time
    times the thread's CPU/running ratio, measured with the CPU clock around one
    synchronous slice in 32; ``"thread"`` reads it around every slice (exact per
    step, at 0.5–3 µs a read on a virtual machine); ``"wall"`` never reads it. ``profile=False``
    turns the profile off: no clock read at all, runs keep no step profiles.
    """


    def __init__(
        self,
        store: RunStore | None = None,
        executor: ToolExecutor | None = None,
        *,
        aggregator: ProfileAggregator | None = None,
        clock: CpuClock = "sampled",
        observers: Sequence[Observer] = (),
        profile: bool = True,
    ) -> None:
        _check_parts(store, executor)
        self.store = store or MemoryRunStore()
        self._own_store = store is None
        self.executor = executor or ToolExecutor()
        self._own_executor = executor is None
        self.aggregator = aggregator
        self._cpu = cpu_clock(clock)
        #: ``profile=False``: no clock is read and runs keep no workload profile (the floor).
        self.profile = profile
        self._stopwatch: type[Stopwatch] = (
            NoStopwatch if not profile else SampledStopwatch if clock == "sampled" else Stopwatch
        )
        self.observers: list[Observer] = list(observers)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelling: set[str] = set()
        self._pausing: set[str] = set()
        # Runs cancelled in the store by :meth:`cancel_stored` (recent ones, bounded): a
        # driver that read the record before that write adopts the stored end instead.
        self._ended_outside: dict[str, asyncio.Future[None]] = {}
        # Models this engine has driven: their HTTP sessions are opened by our calls, so
        # aclose() closes them (a model used again later reopens its session lazily).
        self._models: dict[int, Model] = {}
        #: Metrics and tracing (see podium.engine.hook); None costs one test per step.
        self.hook: EngineHook | None = None
        #: Where model tokens go while a client listens to a run (see podium.streaming);
        #: None costs one test per step, and so does a channel nobody listens to.
        self.tokens: TokenChannel | None = None

    async def aclose(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        models, self._models = list(self._models.values()), {}
        for model in models:
            await model.aclose()
        if self._own_executor:
            self.executor.close()
        if self._own_store:
            await self.store.aclose()
