"""A turn on a thread whose process is SIGKILLed around the thread's settle.

    python _thread_crash.py DB THREAD_ID INPUT SHAPE before|after

Runs one turn of ``agent(SHAPE)`` on the thread and kills its own process with
SIGKILL when the engine settles that turn: ``before`` the thread's write (the
run's end is stored, the thread does not have it), or ``after`` it (the write is
committed, nothing after it ran). The test imports :func:`agent` to run the
other turns of the same conversation.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence

from podium import Agent, ContextPolicy, Engine, FunctionModel, ModelRequest, tool, tool_call_reply
from podium.messages import Message
from podium.store.sqlite import SQLiteRunStore
from podium.threads.record import ThreadRecord

SHAPES = ("answer", "tool", "compact")


@tool
async def look(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: What to look up.
    """
    return f"notes on {topic}"


def agent(shape: str) -> Agent:
    """Answers deterministically; ``tool`` looks its input up first; ``compact`` keeps
    so small a context that earlier turns are summarized before the first call."""

    def reply(messages: Sequence[Message], request: ModelRequest) -> object:
        if messages[0].content.startswith("Summarize"):
            return "summary of earlier turns"
        text = [m.content for m in messages if m.role == "user"][-1]
        if shape == "tool" and request.step == 0:
            return tool_call_reply(("look", json.dumps({"topic": text})))
        users = sum(m.role == "user" for m in messages)
        return f"answer to {text} after {users} inputs"

    policy = ContextPolicy(
        max_context_tokens=130, keep_last_turns=1, summary_max_tokens=20, max_tool_result_tokens=30
    )
    return Agent(
        "turns", FunctionModel(reply), "Answer.", [look],  # type: ignore[arg-type]
        context=policy if shape == "compact" else None,
    )


class KillingStore(SQLiteRunStore):
    """Kills the process when the thread's write settles a run (before or after it)."""

    def __init__(self, path: str, when: str) -> None:
        super().__init__(path)
        self.when = when

    async def update_thread(self, thread: ThreadRecord) -> None:
        settling = thread.settled > 0 and thread.pending == []  # this turn's settle
        if settling and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        await super().update_thread(thread)
        if settling and self.when == "after":
            os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, thread_id: str, text: str, shape: str, when: str) -> None:
    async with KillingStore(db, when) as store, Engine(store) as engine:
        await engine.run(agent(shape), text, thread_id=thread_id)
    print("not killed", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
