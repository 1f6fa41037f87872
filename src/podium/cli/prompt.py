"""A line typed at a terminal, read on the event loop so that Ctrl-C and Ctrl-D end it.

``asyncio.to_thread(input, ...)`` cannot be stopped: Ctrl-C cancelled the task
awaiting it, then ``asyncio.run`` waited at exit for the thread still blocked in
``input()``, forever (a second Ctrl-C found no handler left to raise). Here the
loop watches the terminal instead, so a cancelled read leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import sys

__all__ = ("read_line",)


async def read_line(prompt: str) -> str:
    """Write ``prompt`` and return the line typed (without its end).

    Raises :class:`EOFError` on end of input (Ctrl-D at the start of a line, or a
    terminal that went away). Cancelling it (Ctrl-C under ``asyncio.run``) stops the
    read at once.
    """
    out = sys.stdout
    out.write(prompt)
    out.flush()
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    typed = bytearray()
    line: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        if line.done():
            return
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:  # the terminal was closed under us: its input has ended
            chunk = b""
        if not chunk:  # end of input: what was typed before it, else EOF
            if typed:
                line.set_result(bytes(typed))
            else:
                line.set_exception(EOFError())
            return
        typed.extend(chunk)
        if b"\n" in chunk:
            line.set_result(bytes(typed))

    loop.add_reader(fd, readable)
    try:
        data = await line
    except (EOFError, asyncio.CancelledError):
        out.write("\n")  # what is printed next starts on a line of its own
        out.flush()
        raise
    finally:
        loop.remove_reader(fd)
    return data.split(b"\n", 1)[0].rstrip(b"\r").decode(errors="replace")
