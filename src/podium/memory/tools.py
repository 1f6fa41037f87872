"""Long-term memory as two tools an agent calls: ``remember`` and ``recall``.

The namespace is fixed (``"support"``) or computed per call from the run: pass
:func:`per_run` to keep a memory per tenant, per thread or per agent.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from podium.errors import ConfigError, RunNotFoundError
from podium.memory.base import Memory
from podium.tools.tool import Tool, ToolContext, tool

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.store.base import RunStore

__all__ = ("Namespace", "memory_tools", "per_run")

#: A namespace, or how to find it from the call (sync or async).
Namespace = str | Callable[[ToolContext], "str | Awaitable[str]"]


def per_run(store: RunStore, template: str = "{tenant}") -> Callable[[ToolContext], Awaitable[str]]:
    """A namespace from the calling run's record: ``{tenant}``, ``{thread}``, ``{agent}``.

    One read of the run's record per memory call (only calls of these tools pay it;
    a child run, an agent called as a tool, reads its parents' up to the thread's).
    ``store`` must be the store the runs are in (the engine's): a run it does not hold
    fails the memory call (:class:`~podium.errors.RunNotFoundError`, which the model
    reads as the tool's error) rather than fall back to some tenant's namespace. So
    does ``{thread}`` for a run on no thread: an empty thread would be one namespace
    shared by every tenant's runs without a thread.
    """

    async def namespace(ctx: ToolContext) -> str:
        record = await store.get(ctx.run_id)
        if record is None:
            # Never guess: a fallback namespace would be shared by every tenant's runs.
            raise RunNotFoundError(
                f"{ctx.run_id} (no memory namespace: per_run() needs the store the "
                "runs are kept in)"
            )
        thread = record.thread_id
        if "{thread" in template:
            # A child run has no thread of its own: its conversation is its root's.
            parent: RunRecord | None = record
            while thread is None and parent is not None and parent.parent_run_id is not None:
                parent = await store.get(parent.parent_run_id)
                thread = None if parent is None else parent.thread_id
            if thread is None:
                raise ConfigError(
                    f"run {record.run_id} is on no thread: no per-thread memory namespace"
                )
        return template.format(tenant=record.tenant, thread=thread or "", agent=record.agent)

    return namespace


def memory_tools(
    memory: Memory, namespace: Namespace = "default", *, limit: int = 5
) -> list[Tool[Any, Any]]:
    """``remember(text)`` and ``recall(query)`` over ``memory`` in ``namespace``.

    ``remember`` stores under the call's idempotency key, so a call repeated after a
    crash replaces its own item instead of adding a second. Example::

        memory = StoreMemory(store)
        agent = Agent("assistant", model, tools=[*memory_tools(memory, per_run(store))])
    """
    given: object = memory  # (a caller without type checking may pass anything)
    if not isinstance(given, Memory):  # a run store, say: every call would fail later
        hint = " (a run store: wrap it, StoreMemory(store))" if hasattr(given, "journal") else ""
        raise ConfigError(f"memory_tools: give a Memory, not {type(given).__name__}{hint}")

    async def resolve(ctx: ToolContext) -> str:
        if isinstance(namespace, str):
            return namespace
        found = namespace(ctx)
        return await found if inspect.isawaitable(found) else found

    @tool(side_effects=True)
    async def remember(text: str, ctx: ToolContext) -> str:
        """Keep a fact for later conversations (a preference, a name, a decision).

        Args:
            text: The fact, as one self-contained sentence.
        """
        item = await memory.put(await resolve(ctx), text, key=ctx.idempotency_key)
        return f"remembered: {item.text}"

    @tool
    async def recall(query: str, ctx: ToolContext) -> str:
        """Look up facts kept in earlier conversations.

        Args:
            query: Words the fact would contain.
        """
        items = await memory.search(await resolve(ctx), query, limit=limit)
        if not items:
            return "nothing remembered about that"
        return "\n".join(f"- {item.text}" for item in items)

    return [remember, recall]
