"""``ParentReceiver`` fed by a ``Sampler`` running in a worker process.

The aitune-style pattern: a worker (a training process, a data loader) puts dict rows on a
multiprocessing queue; the parent collects them in a crash-safe journal and gets a pandas
DataFrame back, or a CSV dump if it dies. Here the worker's rows are stroboscope windows: the
worker samples at 100 Hz in C++ and sends one row per 0.1 s window (its mean CPU, RSS, and the
rows behind it)::

    python examples/receiver_fed_by_sampler.py --out /tmp/run

Writes ``receiver.csv`` (every row the parent received) in ``--out`` and prints a summary.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import pyarrow.compute as pc
import stroboscope
from stroboscope.compat.aitune import ParentReceiver


def worker(queue: Any, windows: int) -> None:
    """Sample this process; put one row per 0.1 s window on ``queue``."""
    with stroboscope.Sampler(0.01, sources=["cpu", "memory", "process"]) as sampler:
        for window in range(windows):
            end = time.monotonic() + 0.1
            while time.monotonic() < end:  # the worker's own work
                sum(i * i for i in range(5000))
            table = sampler.drain().to_arrow()
            row: dict[str, Any] = {"window": window, "rows": table.num_rows, "pid": os.getpid()}
            for column in ("cpu.util_pct", "proc.cpu_pct", "proc.rss_bytes"):
                mean = pc.mean(table.column(column)).as_py()  # nulls (not due) are skipped
                if mean is not None:
                    row[column] = mean
            queue.put(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for receiver.csv")
    parser.add_argument("--windows", type=int, default=8, help="windows the worker sends")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    receiver = ParentReceiver(queue, crash_safe=False)
    receiver.start()
    proc = ctx.Process(target=worker, args=(queue, args.windows))
    proc.start()
    proc.join(timeout=120)
    deadline = time.monotonic() + 30
    while receiver.rows_received < args.windows and time.monotonic() < deadline:
        time.sleep(0.05)  # the receiver's thread takes the last rows off the queue
    receiver.stop()
    df = receiver.get_metrics()
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "receiver.csv")
    receiver.snapshot(out, reset_metrics=False)
    print(f"received {len(df)} windows from worker {proc.pid}; written to {out}")
    print(df[["window", "rows", "proc.rss_bytes"]].to_string(index=False))


if __name__ == "__main__":
    main()
