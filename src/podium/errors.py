"""The exception tree.

::

    PodiumError
    ├── ConfigError                 a setting, scenario or agent definition is wrong
    ├── ToolDefinitionError         a function cannot become a tool
    ├── ModelError                  a model backend failed
    │   ├── ModelUnavailableError   connection refused, circuit open, every retry spent
    │   ├── ModelTimeoutError       a connect / first-byte / total timeout passed
    │   ├── ModelHTTPError          the backend answered with an error status
    │   │   └── ModelContextLengthError  the prompt does not fit the model's context
    │   └── ModelReplyError         the reply could not be understood (bad JSON, truncated stream)
    ├── StoreError                  the run store failed
    │   ├── RunNotFoundError        no run with that id
    │   ├── StaleRunError           another writer advanced the run (optimistic concurrency)
    │   ├── ThreadNotFoundError     no thread with that id (or not the tenant's)
    │   └── StoreUnavailableError   the store's service cannot be reached (also a ConnectionError)
    ├── QueueUnavailableError       the queue's service cannot be reached (also a ConnectionError)
    ├── RunError                    a run ended without an answer (``reason`` says why)
    ├── OutputValidationError       a run's output does not match the type asked for
    └── MissingExtraError           a feature needs an extra that is not installed (also a
                                    ModuleNotFoundError)

Control flow inside a tool is kept apart from failures: a tool raises
:class:`RetryableToolError` to ask for a retry with backoff; any other exception
(``SystemExit`` and other ``BaseException`` subclasses too, but ``KeyboardInterrupt``
and a cancellation of the run) becomes an error observation the model sees, never a
crash of the run or of its worker.
"""

from __future__ import annotations

__all__ = (
    "ConfigError",
    "DecisionError",
    "Interrupt",
    "MissingExtraError",
    "ModelContextLengthError",
    "ModelError",
    "ModelHTTPError",
    "ModelReplyError",
    "ModelTimeoutError",
    "ModelUnavailableError",
    "OutputValidationError",
    "PodiumError",
    "QueueUnavailableError",
    "RetryableToolError",
    "RunError",
    "RunNotFoundError",
    "StaleRunError",
    "StoreError",
    "StoreUnavailableError",
    "ThreadNotFoundError",
    "ToolDefinitionError",
)


class PodiumError(Exception):
    """Base class of every error Podium raises on purpose."""


class ConfigError(PodiumError):
    """A setting, scenario file or agent definition is invalid."""


class ToolDefinitionError(PodiumError):
    """A function cannot be turned into a tool (bad signature, unsupported type)."""


class ModelError(PodiumError):
    """A model backend failed to produce a reply."""


class ModelUnavailableError(ModelError):
    """The backend cannot be reached: connection refused, circuit open, retries spent."""


class ModelTimeoutError(ModelError):
    """A connect, first-byte or total timeout passed."""


class ModelHTTPError(ModelError):
    """The backend answered with an error status.

    ``message`` is the server's own message (the ``error.message`` of its JSON
    body, else the body) kept whole up to :attr:`MAX_MESSAGE` characters, since
    it is what a failed run records; ``body`` is the raw body (bounded by the
    client). ``invalid_request`` is true when the server said the request itself
    is wrong, whatever the status (some servers answer a bad field with 500).
    """

    MAX_MESSAGE = 8_000

    def __init__(
        self,
        status: int,
        body: str,
        *,
        retry_after: float | None = None,
        message: str | None = None,
        invalid_request: bool = False,
        backend: str = "",
    ) -> None:
        text = (message if message is not None else body).strip()
        if len(text) > self.MAX_MESSAGE:
            text = text[: self.MAX_MESSAGE] + f"… ({len(text) - self.MAX_MESSAGE} more characters)"
        # ``backend`` (the client's name, model@host:port) leads: in a pool, which one said it
        said = f"HTTP {status}: {text}"
        super().__init__(f"{backend}: {said}" if backend else said)
        self.status = status
        self.backend = backend
        self.body = body
        self.message = text
        self.retry_after = retry_after
        self.invalid_request = invalid_request


class ModelContextLengthError(ModelHTTPError):
    """The prompt (with the requested completion) does not fit the model's context.

    An agent can react: compact its history and try again.
    """


class ModelReplyError(ModelError):
    """The reply could not be understood: invalid JSON, a truncated stream, bad arguments."""


class StoreError(PodiumError):
    """The run store failed."""


class RunNotFoundError(StoreError):
    """No run with that id exists (for this tenant)."""


class StaleRunError(StoreError):
    """Another writer advanced the run first; this writer's checkpoint is refused."""


class ThreadNotFoundError(StoreError):
    """No thread with that id: never created, deleted, expired, or another tenant's."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store's service (Redis) cannot be reached; what was written before is intact."""


class QueueUnavailableError(PodiumError, ConnectionError):
    """The queue's service (Redis) cannot be reached; a worker backs off and tries again."""


class RunError(PodiumError):
    """A run ended without an answer: ``reason`` is the record's stable code
    (``max_steps``, ``deadline``…), ``error`` the human-readable detail."""

    def __init__(self, run_id: str, status: str, reason: str, error: str | None = None) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"run {run_id} {status} ({reason}){detail}")
        self.run_id = run_id
        self.status = status
        self.reason = reason
        self.error = error


class OutputValidationError(PodiumError, ValueError):
    """A run's output does not decode as the type asked for (``RunRecord.output_as``)."""
class MissingExtraError(PodiumError, ModuleNotFoundError):
    """A feature was asked for whose optional dependencies (an extra) are not installed.

    One line names the feature and the extra, e.g. ``podium.tools.mcp (MCP tools) needs
    the 'mcp' extra (no module named 'mcp'): pip install 'podium[mcp]'``. It is a
    :class:`ModuleNotFoundError` too, so code that guards an optional import with
    ``except ImportError`` still works.
    """

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the {extra!r} extra (no module named {module!r}): "
            f"pip install 'podium[{extra}]' (in a checkout: pip install -e '.[{extra}]')",
            name=module,
        )
        self.extra = extra


class DecisionError(PodiumError):
    """A decision on a waiting run was refused: ``status`` is the HTTP status it maps to
    (404 nothing to decide, 409 decided already or the run has moved on, 422 invalid)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class Interrupt(Exception):
    """Raised by a tool to ask a human ``question``: the run waits (no worker held).

    The human's answer becomes the tool call's result, read by the model; the tool
    is not called again (so nothing it did before asking is repeated). Not a
    :class:`PodiumError`: it is control flow that never escapes the executor.
    """

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class RetryableToolError(Exception):
    """Raised by a tool to ask for another attempt (with backoff and jitter).

    Not a :class:`PodiumError`: it is control flow between a tool and its
    policy, and never escapes the executor.
    """
