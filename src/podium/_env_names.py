"""The ``PODIUM_*`` variables read one by one (not settings of ``podium.toml``): each
value is checked where the configuration is loaded, so a bad one is one line naming the
variable at start-up, never accepted silently or a traceback later.

Other single ``PODIUM_*`` names belong to applications (and tests) and are left alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from podium.errors import ConfigError

__all__ = ("check_single_variable",)


def _number(name: str, value: str, off: tuple[str, ...] = ()) -> None:
    if value.strip().lower() in off:
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number >= 0):
        also = f" (or {', '.join(off)})" if off else ""
        raise ConfigError(f"{name}={value!r}: expected a number >= 0{also}")


def _blocking_ms(name: str, value: str) -> None:
    _number(name, value, off=("off", "false", "no"))


def _directory(name: str, value: str) -> None:
    if not os.path.isdir(value):
        raise ConfigError(f"{name}={value!r}: not an existing directory")


def _hosts(name: str, value: str) -> None:
    for host in value.split(","):
        host = host.strip()
        if not host or "/" in host or " " in host:
            raise ConfigError(
                f"{name}={value!r}: expected host names separated by commas, e.g. a.com,b.org"
            )


def _text(name: str, value: str) -> None:
    if not value.strip():
        raise ConfigError(f"{name} is empty; unset it for the default")


#: What each variable Podium reads must hold (PODIUM_GC and PODIUM_TRACING have checks of
#: their own, run by the commands: podium.gctune, podium.observe.otel_env).
CHECKS: dict[str, Callable[[str, str], None]] = {
    "PODIUM_BLOCKING_MS": _blocking_ms,
    "PODIUM_TRACES_PER_SECOND": _number,
    "PODIUM_DATA_DIR": _directory,
    "PODIUM_FETCH_ALLOW_HOSTS": _hosts,
    "PODIUM_MODEL": _text,
}


def check_single_variable(name: str, value: str) -> None:
    """Raise :class:`ConfigError` naming ``name`` if Podium reads it and ``value`` is bad."""
    check = CHECKS.get(name.upper())
    if check is not None:
        check(name, value)
