"""Saturate every core with busy loops, to try the test suite on a busy machine.

    python bench/cpu_hog.py -- python -m pytest          # the suite with every core busy
    python bench/cpu_hog.py --procs 2 -- python -m pytest tests/distributed
    python bench/cpu_hog.py --seconds 60                 # just the load, for a minute

Starts ``--procs`` processes (default: one per CPU this process may use) that spin at the
normal priority, runs the command after ``--`` (if any) and stops the spinners when it
ends, returning its exit status. This is the load of issue 29's "busy machine": the
suite's processes get about half a core each instead of a whole one. The spinners are
stopped whatever happens (Ctrl-C included); they also stop on their own if this process
dies, so a killed hog leaves no spinner behind.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def _spin(parent: int) -> None:
    """Spin until the parent is gone (checked every few million iterations)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    n = 0
    while True:
        n += 1
        if n % 5_000_000 == 0 and os.getppid() != parent:
            return


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)),
                   help="spinning processes (default: one per usable CPU)")
    p.add_argument("--seconds", type=float, default=None,
                   help="without a command: spin this long (default: until Ctrl-C)")
    args = p.parse_args(argv)
    spinners = [multiprocessing.Process(target=_spin, args=(os.getpid(),), daemon=True)
                for _ in range(args.procs)]
    for s in spinners:
        s.start()
    print(f"cpu_hog: {args.procs} spinning processes", file=sys.stderr, flush=True)
    try:
        if command:
            return subprocess.call(command)
        if args.seconds is not None:
            time.sleep(args.seconds)
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 130
    finally:
        for s in spinners:
            s.terminate()
        for s in spinners:
            s.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
