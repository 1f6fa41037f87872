"""What a model call raises or returns that is not a model's answer nor its failure.

Podium's model clients raise :class:`~podium.errors.ModelError` for a backend's
failures and return a :class:`~podium.models.base.ModelResponse`; a custom model
(or its reply function) that raises anything else, or returns anything else, has a
bug. The engine turns that into a ``ModelError``, so the run fails with
``model_error`` and the traceback is logged, instead of the exception escaping
:meth:`~podium.engine.driver.Engine.run` with the run left ``running`` (and, under a
worker, being delivered again until it is dead-lettered). An ``OSError`` is not
turned: it is a service away (the token channel's Redis, say), which a worker waits
out and resumes from.
"""

from __future__ import annotations

import logging

from podium.errors import ModelError
from podium.models.base import Model

__all__ = ("model_fault", "not_a_reply")

log = logging.getLogger("podium.engine")


def model_fault(model: Model, exc: Exception) -> ModelError:
    """The ``ModelError`` for ``exc``, raised by ``model``'s code (logged here)."""
    log.error("model %r raised %s", model.name, type(exc).__name__, exc_info=exc)
    return ModelError(f"{model.name} raised {type(exc).__name__}: {exc}")


def not_a_reply(model: Model, value: object) -> ModelError:
    """The ``ModelError`` for a ``request()`` that returned ``value``, not a reply."""
    return ModelError(
        f"{model.name}: request() returned {type(value).__name__} {value!r:.80}, not a "
        "ModelResponse"
    )
