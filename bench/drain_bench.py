"""The recorder's drain of shared events under a flood: a command's process that writes scopes
as fast as it can into a ring of 2**20 edges (the default) for a few seconds, polled as
``stroboscope record`` polls; every edge read back once, and what the drain cost.

Each figure from one run: the writer's edges per second, the edges read back (the drained file
and the ring together) against those written, lost and overwritten, and the drain thread's CPU
(``time.thread_time_ns()`` of the polling thread) per edge and per second.

Usage::

    python bench/drain_bench.py [--seconds 3] [--capacity 1048576]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from bench_common import cpu_model

WRITER = """
import sys, time, stroboscope
s = stroboscope.annotate("flood")
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    for _ in range(1000):
        with s:
            pass
    n += 1000
print(n)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--capacity", type=int, default=1 << 20)
    args = parser.parse_args()
    from stroboscope.formats.shared_events import (
        EVENTS_CAPACITY_ENV,
        EVENTS_DIR_ENV,
        read_events_dir,
    )
    from stroboscope.formats.shared_events_drain import EventsDrain

    with tempfile.TemporaryDirectory(prefix="stroboscope-drain-") as d:
        env = {**os.environ, EVENTS_DIR_ENV: d, EVENTS_CAPACITY_ENV: str(args.capacity)}
        drain = EventsDrain(d)
        cpu: list[int] = []
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(args.seconds)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )

        def timed() -> None:
            c0 = time.thread_time_ns()
            drain._run()
            cpu.append(time.thread_time_ns() - c0)

        drain._thread = threading.Thread(target=timed, daemon=True)
        drain._thread.start()
        out, _ = proc.communicate()
        wall = time.perf_counter() - t0
        drain.stop()
        calls = int(out.strip())
        table = read_events_dir(d)
        (counts,) = json.loads(table.schema.metadata[b"events_files"])
    edges = 2 * calls
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; ring {args.capacity:,} edges")
    print(f"writer: {edges:,} edges in {args.seconds:.1f} s ({edges / args.seconds:,.0f} edges/s)")
    print(
        f"read back {table.num_rows:,} of {edges:,}; lost {counts['lost']:,}, "
        f"overwritten {counts['overwritten']:,}"
    )
    print(
        f"drain thread CPU {sum(cpu) / 1e6:.1f} ms over {wall:.1f} s "
        f"({sum(cpu) / max(edges, 1):.0f} ns per edge, {sum(cpu) / 1e7 / wall:.2f} % of a core)"
    )


if __name__ == "__main__":
    main()
