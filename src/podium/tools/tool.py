"""``@tool``: a typed Python function becomes a tool the model can call.

The signature becomes an argument struct (decoded and validated in one pass)
and a JSON Schema; the Google-style docstring gives the description and the
per-argument descriptions. A parameter annotated :class:`ToolContext` is not
part of the schema: it receives the run id, step, call index and the
idempotency key ``run_id:step:call``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
import typing
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import msgspec

from podium.errors import ConfigError, ToolDefinitionError
from podium.models.base import ToolDefinition
from podium.security.sandbox import Sandbox
from podium.tools.policy import BreakerPolicy, CircuitBreaker, ToolPolicy
from podium.tools.schema import build_args_struct, parse_docstring, schema_for

log = logging.getLogger("podium.tools")
__all__ = ("ApprovalPolicy", "Tool", "ToolContext", "tool")

P = ParamSpec("P")
R = TypeVar("R")

#: ``requires_approval``: True, or a function of the call's decoded arguments and its
#: :class:`ToolContext` saying whether this call needs a human's approval.
ApprovalPolicy = bool | Callable[[Any, "ToolContext"], bool]


def _always(args: Any, ctx: ToolContext) -> bool:
    return True


class ToolContext(msgspec.Struct, frozen=True, gc=False):
    """What a tool may know about the call it serves."""

    run_id: str
    step: int
    call_index: int
    call_id: str

    @property
    def idempotency_key(self) -> str:
        """``run_id:step:call`` — the same on every attempt and after a resume."""
        return f"{self.run_id}:{self.step}:{self.call_index}"


class Tool(Generic[P, R]):
    """A callable tool: the function, its schema, its argument struct and its policy.

    Calling a ``Tool`` directly calls the function, so decorated functions stay
    usable (and testable) as plain functions.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        policy: ToolPolicy | None = None,
        requires_approval: ApprovalPolicy = False,
    ) -> None:
        _refuse_non_function(fn, name)
        if name is not None and not isinstance(name, str):
            raise ToolDefinitionError(f"tool name {name!r}: a str, not {type(name).__name__}")
        if description is not None and not isinstance(description, str):
            raise ToolDefinitionError(
                f"tool description {description!r:.40}: a str, not {type(description).__name__}"
            )
        self.fn = fn
        self.name = name or fn.__name__
        if not self.name.replace("_", "").replace("-", "").isalnum():
            lam = not name and fn.__name__ == "<lambda>"
            hint = " (a lambda has no name: use a def, or pass name=...)" if lam else ""
            raise ToolDefinitionError(
                f"tool name {self.name!r}: use letters, digits, _ and -{hint}"
            )
        self.policy = policy or ToolPolicy()
        self.is_async = inspect.iscoroutinefunction(fn)
        if self.policy.cpu_bound and self.is_async:
            raise ToolDefinitionError(f"tool {self.name!r}: cpu_bound tools must be sync functions")
        if self.policy.cpu_bound and "<locals>" in fn.__qualname__:
            # The process pool imports the function by module and name: a nested one (or a
            # lambda) cannot be found there, and every call would fail.
            raise ToolDefinitionError(
                f"tool {self.name!r}: cpu_bound tools run in other processes, which import "
                f"them: define {fn.__qualname__.split('.<locals>')[0]}'s "
                f"{fn.__name__!r} at module level"
            )
        self.context_param = _find_context_param(fn)
        doc = parse_docstring(fn.__doc__)
        if not (description or doc.summary):  # the model would see only the name
            log.warning(
                "tool %r has no description: give its function a docstring (or "
                "description=...); the model reads it to know when to call the tool",
                self.name,
            )
        self.description = description or doc.summary or self.name
        skip = frozenset({self.context_param}) if self.context_param else frozenset()
        self.args_type, self.param_names = build_args_struct(fn, self.name, skip)
        #: Whether a call may pass the arguments' fields positionally (no context parameter,
        #: every parameter positional-or-keyword, the struct's fields in their order): the
        #: executor then builds no keyword dict at every call.
        self.positional = self.context_param is None and _in_order(fn, self.args_type)
        self.parameters = schema_for(self.args_type, doc.params)
        unknown = [a for a in self.policy.secret_args if a not in self.param_names]
        if unknown:  # a misspelt secret would be journaled in clear
            raise ToolDefinitionError(
                f"tool {self.name!r}: secret_args names {', '.join(map(repr, unknown))}, which "
                f"is not a parameter (its parameters: {', '.join(self.param_names) or 'none'})"
            )
        self.definition = ToolDefinition(self.name, self.description, self.parameters)
        #: Parses and validates a JSON object of the tool's arguments (``decode_arguments``
        #: takes a model's empty string for ``{}`` too).
        self.decoder = msgspec.json.Decoder(self.args_type)
        self.breaker = CircuitBreaker(self.policy.breaker) if self.policy.breaker else None
        #: Whether the executor may start this tool inline on the loop (see ToolExecutor).
        self.inline = (
            self.is_async
            and self.breaker is None
            and self.policy.max_concurrency is None
            and self.policy.sandbox is None
        )
        #: Whether a call needs a human's approval before it runs (None: never; the engine
        #: tests only this attribute, see podium.engine.approvals).
        self.approval: Callable[[Any, ToolContext], bool] | None = (
            _always if requires_approval is True else requires_approval or None
        )
        if self.approval is not None and not callable(self.approval):
            raise ToolDefinitionError(
                f"tool {self.name!r}: requires_approval takes True or a function (args, ctx)"
            )
        self.module = getattr(fn, "__module__", None)
        self.qualname = getattr(fn, "__qualname__", self.name)

    def decode_arguments(self, raw: str) -> msgspec.Struct:
        """Parse and validate the model's arguments (raises msgspec.DecodeError/ValidationError)."""
        return self.decoder.decode(raw or "{}")

    def kwargs(self, args: msgspec.Struct, ctx: ToolContext | None) -> dict[str, Any]:
        kwargs = msgspec.structs.asdict(args)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return kwargs

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _in_order(fn: Callable[..., Any], args_type: type[msgspec.Struct]) -> bool:
    """Whether ``fn`` takes ``args_type``'s fields positionally, in the struct's order. Its
    own signature, not the one ``functools.wraps`` shows: a wrapper taking ``**kwargs``
    takes no positional arguments."""
    try:
        params = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):
        return False
    return all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params) and tuple(
        p.name for p in params
    ) == args_type.__struct_fields__


def _refuse_non_function(fn: object, name: str | None) -> None:
    """A tool is a function, a bound method or a wrapper of one (``functools.cache``);
    what cannot work is refused here, saying what to write instead (the executor calls
    ``fn(**arguments)`` and sends its result, so a generator could not work)."""
    if isinstance(fn, Tool):
        raise ToolDefinitionError(f"{fn!r} is a tool already: pass it as it is")
    if isinstance(fn, type):
        raise ToolDefinitionError(
            f"@tool takes a function, not the class {fn.__name__}: decorate a function, "
            "or a method on an instance: tool(obj.method)"
        )
    if isinstance(fn, functools.partial):
        raise ToolDefinitionError(
            "@tool cannot take a functools.partial (it has no name, docstring or type hints "
            "of its own, and its bound arguments would show in the schema): write a def that "
            "calls the function and decorate that"
        )
    if not callable(fn):
        raise ToolDefinitionError(
            f"@tool takes a function (def or async def), not {type(fn).__name__} {fn!r}"
        )
    own_name = getattr(fn, "__name__", None)
    if not isinstance(own_name, str):
        raise ToolDefinitionError(
            f"@tool takes a function, and a {type(fn).__name__} object is not one: decorate "
            'its method instead, e.g. tool(name="...")(obj.__call__)'
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ToolDefinitionError(
            f"tool {name or own_name!r} is a generator: a tool returns its result "
            "(collect the items into a list and return that)"
        )


def _check_options(secret_args: object, breaker: object) -> None:
    if isinstance(secret_args, str):  # tuple("api_key") would be ("a", "p", "i", ...)
        raise ConfigError(
            f"secret_args takes a tuple of parameter names: secret_args=({secret_args!r},)"
        )
    if isinstance(breaker, bool):  # True is an int: it would mean a threshold of 1
        raise ConfigError(
            "breaker takes a failure threshold (e.g. breaker=5) or a BreakerPolicy, not a bool"
        )


def _find_context_param(fn: Callable[..., Any]) -> str | None:
    """The parameter annotated ``ToolContext`` (or ``ToolContext | None``), if any."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for pname, hint in hints.items():
        if hint is ToolContext:
            return pname
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and ToolContext in (
            typing.get_args(hint)
        ):  # optional so the function can be called without one: still not the model's
            return pname
    return None


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = 30.0,
    retries: int = 0,
    backoff_base: float = 0.1,
    backoff_max: float = 5.0,
    retry_on: tuple[type[BaseException], ...] | None = None,
    breaker: BreakerPolicy | int | None = None,
    max_concurrency: int | None = None,
    side_effects: bool = False,
    cpu_bound: bool = False,
    max_result_tokens: int | None = None,
    sandbox: Sandbox | bool | None = None,
    secret_args: tuple[str, ...] = (),
    secret_result: bool = False,
    requires_approval: ApprovalPolicy = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = 30.0,
    retries: int = 0,
    backoff_base: float = 0.1,
    backoff_max: float = 5.0,
    retry_on: tuple[type[BaseException], ...] | None = None,
    breaker: BreakerPolicy | int | None = None,
    max_concurrency: int | None = None,
    side_effects: bool = False,
    cpu_bound: bool = False,
    max_result_tokens: int | None = None,
    sandbox: Sandbox | bool | None = None,
    secret_args: tuple[str, ...] = (),
    secret_result: bool = False,
    requires_approval: ApprovalPolicy = False,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a typed function (sync or async) into a :class:`Tool`.

    Example::

        @tool(timeout=2.0, retries=2, breaker=5)
        async def get_order(order_id: str) -> dict[str, str]:
            \"\"\"Look up one order.

            Args:
                order_id: The order's id, e.g. "A-1001".
            \"\"\"
            ...

    ``breaker`` takes a :class:`BreakerPolicy` or a failure threshold. ``sandbox`` runs
    the function in a :class:`~podium.security.sandbox.Sandbox` (``True``: the default
    limits; the function must be importable:
    a module-level function; arguments and result travel as JSON). ``secret_args`` and
    ``secret_result`` keep those out of the journal, events and traces.
    ``requires_approval`` (True, or ``lambda args, ctx: args.amount > 100``) stops the
    run before the call until a human approves, rejects or edits it (see
    ``docs/approvals.md``).
    """
    _check_options(secret_args, breaker)
    kwargs: dict[str, Any] = {
        "timeout_s": timeout,
        "retries": retries,
        "backoff_base_s": backoff_base,
        "backoff_max_s": backoff_max,
        "breaker": BreakerPolicy(failure_threshold=breaker)
        if isinstance(breaker, int)
        else breaker,
        "max_concurrency": max_concurrency,
        "side_effects": side_effects,
        "cpu_bound": cpu_bound,
        "max_result_tokens": max_result_tokens,
        "sandbox": Sandbox() if sandbox is True else (sandbox or None),
        "secret_args": tuple(secret_args),
        "secret_result": secret_result,
    }
    if retry_on is not None:
        kwargs["retry_on"] = retry_on
    policy = ToolPolicy(**kwargs)

    def wrap(f: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            f,
            name=name,
            description=description,
            policy=policy,
            requires_approval=requires_approval,
        )

    if fn is not None:
        return wrap(fn)
    return wrap
