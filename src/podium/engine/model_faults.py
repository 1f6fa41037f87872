"""What a model call raises or returns that is not a model's answer nor its failure.

Podium's model clients raise :class:`~podium.errors.ModelError` for a backend's
failures and return a :class:`~podium.models.base.ModelResponse`; a custom model
(or its reply function) that raises anything else, or returns anything else, has a
bug. The engine turns that into a ``ModelError``, so the run fails with
``model_error`` and the traceback is logged (its frames and exception types: the
message may carry a secret the run knows, and goes to the run's error, scrubbed),
instead of the exception escaping :meth:`~podium.engine.driver.Engine.run` with the run
left ``running`` (and, under a worker, being delivered again until it is dead-lettered).
An ``OSError`` is not turned: it is a service away (the token channel's Redis, say),
which a worker waits out and resumes from.
"""

from __future__ import annotations

import logging
import traceback

from podium.errors import ModelError
from podium.messages import ToolCall, Usage
from podium.models.base import Model, ModelResponse

__all__ = ("malformed_reply", "model_fault", "not_a_reply")

log = logging.getLogger("podium.engine")


def model_fault(model: Model, exc: Exception) -> ModelError:
    """The ``ModelError`` for ``exc``, raised by ``model``'s code (logged here)."""
    # Not exc_info: a handler (a log file, an error tracker) would keep the message, and
    # the run's secrets are scrubbed from what the run stores, not from logs.
    log.error("model %r raised %s\n%s", model.name, type(exc).__name__, _frames(exc))
    return ModelError(f"{model.name} raised {type(exc).__name__}: {exc}")


def _frames(exc: BaseException) -> str:
    """The traceback of ``exc`` and the exceptions it was raised from, without their
    messages."""
    parts: list[str] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        frames = "".join(traceback.format_list(traceback.extract_tb(link.__traceback__)))
        parts.append(f"{frames}{type(link).__qualname__} (message in the run's error)")
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return "\n(which led to)\n".join(reversed(parts))


def not_a_reply(model: Model, value: object) -> ModelError:
    """The ``ModelError`` for a ``request()`` that returned ``value``, not a reply."""
    return ModelError(
        f"{model.name}: request() returned {type(value).__name__} {value!r:.80}, not a "
        "ModelResponse"
    )


def malformed_reply(model: Model, response: ModelResponse | None) -> str | None:
    """What is wrong with the fields of ``response`` (a ``ModelResponse`` whose fields
    have the wrong types), or None if nothing is. Only called once a step has failed on
    the reply: the check costs nothing on the steps that do not."""
    if response is None:
        return None
    problems: list[str] = []
    # Typed as what they may be at run time: a custom model's code fills them.
    content: object = response.content
    calls: object = response.tool_calls
    usage: object = response.usage
    if not isinstance(content, str):
        problems.append(f"content is {type(content).__name__}, not str")
    if not isinstance(calls, tuple | list):
        problems.append(f"tool_calls is {type(calls).__name__}, not a tuple of ToolCall")
        calls = ()
    for i, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            problems.append(
                f"tool_calls[{i}] is {type(call).__name__}, not ToolCall(id, name, arguments)"
            )
            continue
        for field in ("id", "name", "arguments"):
            value: object = getattr(call, field)
            if not isinstance(value, str):
                fix = " (JSON text: json.dumps it)" if field == "arguments" else ""
                problems.append(
                    f"tool_calls[{i}].{field} is {type(value).__name__}, not str{fix}"
                )
    if not isinstance(usage, Usage):
        problems.append(f"usage is {type(usage).__name__}, not Usage")
    if not problems:
        return None
    return f"{model.name}: its reply is malformed: {'; '.join(problems)}"
