"""Resident memory of this process, read from /proc (Linux) or getrusage elsewhere."""

from __future__ import annotations

import resource
import sys

__all__ = ("rss_kb",)


def rss_kb() -> int:
    """Current resident set size in KiB (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() // 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak // 1024 if sys.platform == "darwin" else peak
