"""What every layer of :class:`~podium.engine.driver.Engine` shares: its parts (typed here,
set by ``Engine.__init__``), the exceptions that steer the step loop, the phase numbers.

The engine is a chain of layers, one module each, each the base class of the one above
(see "Engine rooms" in docs/architecture.md): ``EngineBase`` ← ``Persistence`` ← ``Waits``
← ``Compaction`` ← ``Calls`` ← ``Steps`` ← ``RunLifecycle`` ← ``StepLoop`` ← ``Engine``.
A layer calls only the layers below it, so no module imports one above it; a method found
through the chain costs what it did on one class (the type's attribute cache).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from podium.agent import Agent
from podium.engine.hook import EngineHook
from podium.engine.profile import ProfileAggregator
from podium.engine.records import JournalEntry, RunRecord, RunStatus
from podium.engine.stopwatch import ENDS, Stopwatch
from podium.models.base import Model
from podium.security.screen import ScreenVerdict
from podium.store.base import RunStore
from podium.streaming.base import TokenChannel
from podium.threads.keeper import ThreadKeeper, keeper_for
from podium.tools.eager import start_eagerly
from podium.tools.executor import ToolExecutor, ToolResult

T = TypeVar("T")
log = logging.getLogger("podium.engine")

#: Called with (run_id, entry) after each journal append: live printing, streaming.
Observer = Callable[[str, JournalEntry], None]

#: How a drive's step loop ended: (status, reason, error).
End = tuple[RunStatus, str | None, str | None]

NO_CALLS: list[Any] = []  # no call held for approval (shared, never mutated)

# The phases of a step, as the stopwatch numbers them.
ASSEMBLE, MODEL, PARSE, TOOLS, MERGE, CHECKPOINT = range(6)
# Where the fast lane stamps each phase's end in its stopwatch's figures (see Stopwatch).
ASSEMBLED, ANSWERED, PARSED, CALLED, MERGED = (ENDS + p for p in range(5))


def by_index(item: tuple[int, ToolResult]) -> int:
    return item[0]


def blocked(verdict: ScreenVerdict) -> str:
    what = f"rule {verdict.rule!r} (score {verdict.score})"
    return f"injection screen blocked the {verdict.source}: {what}"


class Paused(Exception):
    """The run stopped at a step boundary on request (a drain); it stays ``running``."""


class Waiting(Exception):
    """The run is parked ``waiting`` on a human (journaled); its drive ends here."""


class Finish(Exception):
    """Ends the step loop with a terminal status (control flow, never escapes the engine)."""

    def __init__(self, status: RunStatus, reason: str | None, error: str | None = None):
        self.status = status
        self.reason = reason
        self.error = error


async def eager(coro: Coroutine[Any, Any, T], sw: Stopwatch, phase: int) -> tuple[T, bool]:
    """Run ``coro``'s first slice inline; if it suspends, stop counting CPU until it resumes."""
    value, rest = start_eagerly(coro)
    if rest is None:
        return value, False
    sw.suspend(phase)
    try:
        value = await rest
    finally:
        sw.resume(phase)
    return value, True


class EngineBase:
    """The engine's parts, as ``Engine.__init__`` sets them (see there)."""

    store: RunStore
    _own_store: bool
    executor: ToolExecutor
    _own_executor: bool
    aggregator: ProfileAggregator | None
    _cpu: Callable[[], int]
    profile: bool
    _stopwatch: type[Stopwatch]
    observers: list[Observer]
    #: The runs this engine drives now, by id: their tasks (cancel, pause, shutdown).
    _tasks: dict[str, asyncio.Task[Any]]
    _loop: asyncio.AbstractEventLoop | None
    _cancelling: set[str]
    _pausing: set[str]
    _ended_outside: dict[str, asyncio.Future[None]]
    _models: dict[int, Model]
    hook: EngineHook | None
    tokens: TokenChannel | None

    def _execute(
        self,
        agent: Agent,
        record: RunRecord | None,
        admit_ns: int,
        user_input: str = "",
        create: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, RunRecord]:
        """Drive a run (created first if ``record`` is None): the step loop's, the top layer
        (:meth:`podium.engine.loop.StepLoop._execute`), declared here for those below it."""
        raise NotImplementedError

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, remembered: on 3.11 asking for it is a getpid() system call."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    @property
    def threads(self) -> ThreadKeeper:
        """The threads (conversations) of this engine's store."""
        return keeper_for(self.store)
