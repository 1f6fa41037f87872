"""Engine overhead from 1 to 10,000 sessions, with every default on (issue #10).

The same measurement as ``podium bench --overhead`` (see :mod:`podium.cli.overhead`
for the workload), run from a checkout:

    python bench/bench_engine_scaling.py [--sessions 1,100,1000,10000] [--rounds 7]
        [--no-profile] [--latency SECONDS] [--loop asyncio] [--json]
"""

from __future__ import annotations

import sys

from podium.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--overhead", *sys.argv[1:]]))
