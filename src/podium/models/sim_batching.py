"""A continuous-batching latency model, the heart of ``podium sim-server``.

It behaves like a GPU inference server's scheduler (vLLM, SGLang):

* at most ``capacity`` sequences run at once; more wait in FIFO order;
* every engine step produces one token for each running sequence, and a step
  takes ``step_s + step_per_seq_s × running`` (decoding slows as the batch grows);
* a step that admits new sequences also pays their prefill,
  ``prefill_per_token_s × uncached prompt tokens`` (prefill stalls the batch);
* a :class:`PrefixCache` keyed by the prompt's message prefix decides which
  prompt tokens are cached, so a run whose history only grows pays prefill
  for its new messages only.

The engine integrates ``running`` over time, which is what ``/metrics``
reports as occupancy: busy sequence-seconds / (capacity × seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Iterable

import msgspec

from podium.errors import ConfigError
from podium.lifecycle import stop_task

__all__ = ("BatchEngine", "BatchingConfig", "EngineStatistics", "PrefixCache", "SimSequence")


class BatchingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The latency model of one simulated backend (seconds)."""

    capacity: int = 64
    step_s: float = 0.015
    step_per_seq_s: float = 0.0001
    prefill_per_token_s: float = 0.00002
    prefix_cache_tokens: int = 2_000_000

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ConfigError("capacity must be at least 1")
        if min(self.step_s, self.step_per_seq_s, self.prefill_per_token_s) < 0:
            raise ConfigError("step and prefill times must not be negative")


class PrefixCache:
    """An LRU of prompt prefixes, each identified by the hash chain of its messages."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[int, int] = OrderedDict()

    def lookup_and_insert(self, segments: Iterable[tuple[bytes, int]]) -> tuple[int, int]:
        """(prompt tokens, cached tokens) for segments of (bytes, tokens); then cache them all."""
        entries = self._entries
        h = 0
        total = cached = 0
        hit = True
        for data, tokens in segments:
            h = hash((h, data))
            total += tokens
            if hit and h in entries:
                cached += tokens
                entries.move_to_end(h)
                continue
            hit = False
            entries[h] = tokens
            self.tokens += tokens
        while self.tokens > self.max_tokens and entries:
            self.tokens -= entries.popitem(last=False)[1]
        return total, cached


class SimSequence:
    """One request inside the engine; ``tokens`` grows by one per step it runs."""

    __slots__ = (
        "cached_tokens",
        "done",
        "finished",
        "output_tokens",
        "prefill_s",
        "progress",
        "prompt_tokens",
        "tokens",
    )

    def __init__(
        self, output_tokens: int, prefill_s: float, prompt: int = 0, cached: int = 0
    ) -> None:
        self.output_tokens = max(1, output_tokens)
        self.prompt_tokens = prompt
        self.cached_tokens = cached
        self.prefill_s = prefill_s
        self.tokens = 0
        self.done = False
        self.progress = asyncio.Event()
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class EngineStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the engine, as ``/metrics`` exposes it."""

    capacity: int
    running: int
    waiting: int
    requests: int
    tokens: int
    steps: int
    busy_seq_seconds: float
    uptime_s: float
    occupancy: float
    cached_tokens: int
    prompt_tokens: int


class BatchEngine:
    """Runs :class:`SimSequence` objects in continuous batches on the event loop."""

    def __init__(self, config: BatchingConfig) -> None:
        self.config = config
        self.cache = PrefixCache(config.prefix_cache_tokens)
        self._waiting: deque[SimSequence] = deque()
        self._running: list[SimSequence] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started = time.monotonic()
        self.requests = self.tokens = self.steps = 0
        self.busy_seq_seconds = 0.0
        self.prompt_tokens = self.cached_tokens = 0
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=600)
        self._last_sample = 0.0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    def submit(self, prompt: Iterable[tuple[bytes, int]], output_tokens: int) -> SimSequence:
        """Queue a request: its prompt segments (for the prefix cache) and reply length."""
        total, cached = self.cache.lookup_and_insert(prompt)
        self.prompt_tokens += total
        self.cached_tokens += cached
        seq = SimSequence(
            output_tokens, (total - cached) * self.config.prefill_per_token_s, total, cached
        )
        self.requests += 1
        self._waiting.append(seq)
        self._wake.set()
        return seq

    def abort(self, seq: SimSequence) -> None:
        """Drop a sequence whose client went away."""
        if seq.done:
            return
        seq.done = True
        if seq in self._running:
            self._running.remove(seq)
        else:
            with contextlib.suppress(ValueError):
                self._waiting.remove(seq)

    async def _run(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        running, waiting = self._running, self._waiting
        while True:
            prefill = 0.0
            while waiting and len(running) < cfg.capacity:
                seq = waiting.popleft()
                prefill += seq.prefill_s
                running.append(seq)
            if not running:
                self._wake.clear()
                self._sample(loop.time())
                await self._wake.wait()
                continue
            start = loop.time()
            await asyncio.sleep(cfg.step_s + cfg.step_per_seq_s * len(running) + prefill)
            now = loop.time()
            self.busy_seq_seconds += len(running) * (now - start)
            self.steps += 1
            self.tokens += len(running)
            finished = False
            for seq in running:
                seq.tokens += 1
                seq.progress.set()
                if seq.tokens >= seq.output_tokens:
                    seq.done = finished = True
                    if not seq.finished.done():
                        seq.finished.set_result(None)
            if finished:
                running[:] = [s for s in running if not s.done]
            self._sample(now)

    def _sample(self, now: float) -> None:
        if now - self._last_sample >= 0.1:
            self._last_sample = now
            self.samples.append((round(time.time(), 3), len(self._running), len(self._waiting)))

    def statistics(self) -> EngineStatistics:
        uptime = time.monotonic() - self._started
        cap = self.config.capacity
        return EngineStatistics(
            capacity=cap,
            running=len(self._running),
            waiting=len(self._waiting),
            requests=self.requests,
            tokens=self.tokens,
            steps=self.steps,
            busy_seq_seconds=self.busy_seq_seconds,
            uptime_s=uptime,
            occupancy=self.busy_seq_seconds / (cap * uptime) if uptime > 0 else 0.0,
            cached_tokens=self.cached_tokens,
            prompt_tokens=self.prompt_tokens,
        )
