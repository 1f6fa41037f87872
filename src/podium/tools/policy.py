"""Per-tool policies: timeout, retries with backoff and jitter, circuit breaker, concurrency."""

from __future__ import annotations

import random

import msgspec

from podium.breaker import BreakerPolicy, BreakerStatistics, CircuitBreaker
from podium.errors import ConfigError, RetryableToolError
from podium.security.sandbox import Sandbox
from podium.security.secrets import SECRET, SecretMatcher

__all__ = (
    "SECRET",
    "BreakerPolicy", "BreakerStatistics", "CircuitBreaker", "ToolPolicy", "backoff_delay")

# The breaker is shared with the model endpoints; re-exported here, where tools find it.




class ToolPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a tool is called.

    - ``timeout_s``: per attempt; ``None`` for no limit.
    - ``retries``: extra attempts for errors in ``retry_on`` (by default only
      :class:`~podium.errors.RetryableToolError` and timeouts), with exponential
      backoff from ``backoff_base_s`` capped at ``backoff_max_s`` and full jitter.
    - ``breaker``: a circuit breaker shared by every run in the process.
    - ``max_concurrency``: calls of this tool in flight at once, process-wide.
    - ``side_effects``: the tool receives an idempotency key ``run_id:step:call``.
    - ``cpu_bound``: run in the process pool instead of the thread pool (sync tools).
    - ``max_result_tokens``: overrides the agent's truncation limit for this tool.
    - ``secret_args`` / ``secret_result``: kept out of the journal, events and traces
      (see :mod:`podium.security.redact`).
    - ``sandbox``: run the function in this :class:`~podium.security.sandbox.Sandbox`
      (a separate, confined process) instead of in the worker.
    """

    timeout_s: float | None = 30.0
    retries: int = 0
    backoff_base_s: float = 0.1
    backoff_max_s: float = 5.0
    retry_on_timeout: bool = True
    retry_on: tuple[type[BaseException], ...] = (RetryableToolError,)
    breaker: BreakerPolicy | None = None
    max_concurrency: int | None = None
    side_effects: bool = False
    cpu_bound: bool = False
    max_result_tokens: int | None = None
    sandbox: Sandbox | None = None
    secret_args: tuple[str, ...] = ()
    secret_result: bool = False

    def without_secrets(self, text: str, args: object) -> str:
        """``text`` (an error a tool raised, say) with the values of ``args``'s secret
        arguments replaced by :data:`SECRET`: an exception that quotes its input (``bad
        credentials bob:hunter2``) would carry them into the context and the journal."""
        values = []
        for name in self.secret_args:
            value = getattr(args, name, None)
            if value is None or isinstance(value, bool):
                continue
            values.append(value if isinstance(value, str) else str(value))
        # Matched in any form (upper-cased, spaced, encoded), not only byte for byte.
        return SecretMatcher(values).scrub(text) if values else text

    def __post_init__(self) -> None:
        # Types first (a caller without type checking): "5" would fail at the comparison
        # below with Python's words, 1.5 retries would be taken as two.
        retries: object = self.retries
        if not isinstance(retries, int) or isinstance(retries, bool):
            raise ConfigError(f"retries must be a whole number, got {retries!r}")
        timeout: object = self.timeout_s
        if timeout is not None and (not isinstance(timeout, int | float)
                                    or isinstance(timeout, bool)):
            raise ConfigError(f"timeout_s must be a number of seconds or None, got {timeout!r}")
        if self.retries < 0:
            raise ConfigError("retries must be >= 0")
        if self.timeout_s is not None and not self.timeout_s > 0:  # NaN too: it never fires
            raise ConfigError("timeout_s must be positive or None")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError("max_concurrency must be >= 1 or None")
        if self.max_result_tokens is not None and self.max_result_tokens < 1:
            raise ConfigError("max_result_tokens must be >= 1 or None (the agent's limit)")


def backoff_delay(
    attempt: int, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(max, base × 2^attempt)]."""
    cap = min(max_s, base_s * (2**attempt))
    return (rng or random).uniform(0.0, cap)
