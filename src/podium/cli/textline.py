"""One printed line of trusted styles and untrusted text, for the ``podium`` views.

A run's text comes from users, models and tools. Interpolated into rich markup it is read
as markup (``[bold]`` in a reply would style the rest of the line, a trailing backslash
eats the next tag) and its control characters reach the terminal raw (an ESC ``[2J``
in a tool result clears the screen). Built as :class:`~rich.text.Text` it is neither::

    console.print(line(("user", "bold"), ": ", record.input))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podium.observe.display import terminal_safe

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ("Part", "line")

#: A piece of a line: text, or (text, rich style).
Part = str | tuple[str, str]


def line(*parts: Part) -> Text:
    """The parts as one :class:`~rich.text.Text`: never parsed as markup, every control
    character written as a visible escape (see :func:`~podium.observe.display.terminal_safe`)."""
    from rich.text import Text  # with the first line printed: not for `podium --help`

    return Text.assemble(*(terminal_safe(p) if isinstance(p, str) else (terminal_safe(p[0]), p[1])
                           for p in parts))
