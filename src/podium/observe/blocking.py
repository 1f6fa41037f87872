"""The blocking-call detector: names the code that holds an event loop past a threshold.

A synchronous SDK call or a CPU-heavy parse inside a coroutine stalls every
other session on the loop, and nothing fails: the loop just gets slow. The
detector makes it visible, cheaply:

* on the loop, a heartbeat callback runs every ``interval`` (``threshold/2``)
  and notes the time: one timer callback per interval, nothing per step;
* a watchdog thread sleeps until the moment the next heartbeat would be
  ``threshold`` late. If it has not run by then, the loop is stuck *now*, so
  the watchdog reads the loop thread's current stack (``sys._current_frames``)
  — the stack of the code that is blocking it;
* when the heartbeat finally runs it measures how late it is; past the
  threshold it counts the stall and logs it (logger ``podium.observe.blocking``)
  with the sampled stack and its innermost frame of user code.

A stall longer than ``threshold + interval`` is always caught; a shorter one
past the threshold is caught when it straddles a heartbeat. A call that holds
the GIL the whole time (a long C routine) is counted without a stack: the
watchdog cannot run until it lets go. A loop late with no callback running (its
thread sampled waiting inside the loop itself) was starved, not blocked by its
code: the process got no CPU (a busy host, a container's CPU limit) or another
thread held the GIL; it is counted and said so, never blamed on the frame that
started the loop.

Example::

    detector = BlockingDetector(threshold_ms=20)
    detector.start()                  # inside the running loop
    ...
    print(detector.statistics().blocks)
    detector.stop()
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import sysconfig
import threading
import time
import tokenize
import traceback
import types
from collections import deque
from collections.abc import Callable

import msgspec

__all__ = (
    "DEFAULT_THRESHOLD_MS",
    "BlockingDetector",
    "BlockingEvent",
    "BlockingStatistics",
    "detector_from_env",
)

log = logging.getLogger("podium.observe.blocking")

DEFAULT_THRESHOLD_MS = 20.0
#: Environment variable: the threshold in milliseconds, or ``0``/``off`` to disable.
ENV_VAR = "PODIUM_BLOCKING_MS"

_STDLIB = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])
_OWN_FILE = __file__
#: Where a loop's thread waits between callbacks: asyncio's own loop (its selector), or,
#: for uvloop (no Python frames of its own), the frame that runs it.
_IN_LOOP = ("selectors.py",)
_RUNS_LOOP = ("run_until_complete(", "run_forever(")
NO_CALLBACK = ("no callback (the loop was starved: no CPU for the process, a busy host or a "
               "CPU limit, or another thread holding the GIL)")
NO_STACK = "unknown (no stack sampled: a call held the GIL, or the process got no CPU)"


class BlockingEvent(msgspec.Struct, frozen=True):
    """One stall: when, how long the loop was held, and the stack that held it."""

    at: float
    blocked_ms: float
    culprit: str
    stack: tuple[str, ...] = ()


class BlockingStatistics(msgspec.Struct, frozen=True):
    threshold_ms: float
    blocks: int
    blocked_ms_total: float
    max_ms: float
    recent: tuple[BlockingEvent, ...]


def _is_library(filename: str) -> bool:
    return filename == _OWN_FILE or filename.startswith(_STDLIB) or filename.startswith("<")


def _waiting_in_loop(inner: traceback.FrameSummary) -> bool:
    """Whether the loop thread's innermost frame is the loop waiting for its next callback."""
    if inner.filename.startswith(_STDLIB) and inner.filename.endswith(_IN_LOOP):
        return True
    return any(call in (inner.line or "") for call in _RUNS_LOOP)


def _culprit(frames: traceback.StackSummary) -> str:
    """The innermost frame outside the standard library: the code to fix; none when the
    loop's thread was waiting in the loop itself (no callback held it)."""
    if frames and _waiting_in_loop(frames[-1]):
        return NO_CALLBACK
    chosen = None
    for frame in reversed(frames):
        if not _is_library(frame.filename):
            chosen = frame
            break
    if chosen is None and frames:
        chosen = frames[-1]
    if chosen is None:
        return NO_STACK
    return f"{chosen.name} ({chosen.filename}:{chosen.lineno})"


def _extract_stack(frame: types.FrameType) -> traceback.StackSummary:
    """``traceback.extract_stack(frame)``, its source lines read here instead of through
    ``linecache``: that global cache keeps every file it ever read, so stalls sampled in
    ever new places would grow the process by whole source files for its whole life (a
    soak measured megabytes in minutes on a busy host). Runs on the watchdog's thread."""
    calls = [(f.f_code.co_filename, lineno, f.f_code.co_name)
             for f, lineno in traceback.walk_stack(frame)]
    calls.reverse()
    files: dict[str, list[str]] = {}  # each file read once per sample, then let go
    return traceback.StackSummary.from_list(
        [(name, lineno, func, _source_line(files, name, lineno)) for name, lineno, func in calls]
    )


def _source_line(files: dict[str, list[str]], filename: str, lineno: int | None) -> str:
    lines = files.get(filename)
    if lines is None:
        try:
            with tokenize.open(filename) as f:  # honours a coding cookie, as linecache does
                lines = f.readlines()
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            lines = []  # <frozen ...>, a deleted file: the frame shows without its line
        files[filename] = lines
    if lineno is None or not 0 < lineno <= len(lines):
        return ""
    return lines[lineno - 1].strip()


class BlockingDetector:
    """Counts and logs the callbacks that hold the running loop past ``threshold_ms``."""

    def __init__(
        self,
        threshold_ms: float = DEFAULT_THRESHOLD_MS,
        *,
        interval_ms: float | None = None,
        keep: int = 16,
        on_block: Callable[[BlockingEvent], None] | None = None,
    ) -> None:
        if threshold_ms <= 0:
            raise ValueError("threshold_ms must be positive")
        self.threshold_s = threshold_ms / 1e3
        self.interval_s = (interval_ms / 1e3) if interval_ms else self.threshold_s / 2
        self.on_block = on_block
        self._recent: deque[BlockingEvent] = deque(maxlen=keep)
        self._blocks = 0
        self._blocked_s = 0.0
        self._max_s = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._loop_thread = 0
        self._last = 0.0  # when the heartbeat last ran (monotonic); read by the watchdog
        # (heartbeat time it belongs to, the loop thread's stack while stuck)
        self._sample: tuple[float, traceback.StackSummary] | None = None
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        """Watch the running loop (idempotent)."""
        if self._handle is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stopping.clear()
        self._last = time.monotonic()
        self._watchdog = threading.Thread(
            target=self._watch, name="podium-blocking-watchdog", daemon=True
        )
        self._watchdog.start()
        # The first beat is due from now: starting a thread on a busy host is no stall.
        self._last = time.monotonic()
        self._handle = self._loop.call_later(self.interval_s, self._beat)

    def stop(self) -> None:
        """Stop watching (call on the loop's thread)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        self._stopping.set()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.join()

    # -- the loop's side --------------------------------------------------------------------

    def _beat(self) -> None:
        now = time.monotonic()
        previous = self._last
        late = now - previous - self.interval_s
        self._last = now
        if self._loop is not None and self._handle is not None:
            self._handle = self._loop.call_later(self.interval_s, self._beat)
        if late >= self.threshold_s:
            self._report(previous, late)

    def _report(self, since: float, late_s: float) -> None:
        sample = self._sample
        frames = sample[1] if sample is not None and sample[0] == since else None
        self._sample = None
        event = BlockingEvent(
            at=time.time() - late_s,
            blocked_ms=round(late_s * 1e3, 3),
            culprit=_culprit(frames) if frames is not None else _culprit(traceback.StackSummary()),
            stack=tuple(frames.format()) if frames is not None else (),
        )
        self._blocks += 1
        self._blocked_s += late_s
        self._max_s = max(self._max_s, late_s)
        self._recent.append(event)
        log.warning(
            "event loop blocked for %.1f ms (threshold %.0f ms, stall #%d) by %s\n%s",
            event.blocked_ms,
            self.threshold_s * 1e3,
            self._blocks,
            event.culprit,
            "".join(event.stack) or "  (no stack sampled)\n",
        )
        if self.on_block is not None:
            self.on_block(event)

    # -- the watchdog's side ----------------------------------------------------------------

    def _watch(self) -> None:
        stopping = self._stopping
        while not stopping.is_set():
            last = self._last
            wait = last + self.interval_s + self.threshold_s - time.monotonic()
            if wait > 0:
                stopping.wait(wait)
                continue
            if self._last != last:
                continue  # the heartbeat ran meanwhile
            loop = self._loop
            if loop is None or loop.is_closed():
                return  # the loop ended without stop(): nothing left to watch
            sample = self._sample
            if sample is None or sample[0] != last:
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None and self._last == last:
                    self._sample = (last, _extract_stack(frame))
                del frame
            # Still stuck (or the loop is gone): look again in a while, without spinning.
            stopping.wait(self.interval_s)

    # -- reading ----------------------------------------------------------------------------

    def statistics(self) -> BlockingStatistics:
        return BlockingStatistics(
            threshold_ms=self.threshold_s * 1e3,
            blocks=self._blocks,
            blocked_ms_total=round(self._blocked_s * 1e3, 3),
            max_ms=round(self._max_s * 1e3, 3),
            recent=tuple(self._recent),
        )


def detector_from_env(default_ms: float = DEFAULT_THRESHOLD_MS) -> BlockingDetector | None:
    """The detector serving processes run: ``PODIUM_BLOCKING_MS`` sets the threshold
    (default 20 ms); ``0`` or ``off`` disables it (returns None)."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in ("0", "off", "false", "no"):
        return None
    try:
        threshold = float(raw) if raw else default_ms
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; using %s", ENV_VAR, raw, default_ms)
        threshold = default_ms
    if threshold <= 0:
        return None
    return BlockingDetector(threshold)
