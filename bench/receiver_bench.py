"""ParentReceiver rows per second beside the pure-Python receiver design, in the same run.

Both receivers take dict rows from the same kind of queue on a thread of this process, and both
keep every row taken safe from this process's death:

- ``pure-Python (pickle to child)``: the pure-Python design. The thread sends every row through a
  ``multiprocessing`` pipe (``Connection.send``: one pickle and one write per row) to a child
  process that appends it to a list (and would write the CSV when its parent dies).
- ``ParentReceiver``: stroboscope's. The thread takes every row already waiting, encodes the batch
  as JSON lines and appends it to the journal with one ``os.write``; the watchdog child it starts
  (crash_safe=True) does nothing per row.

Two scenarios: rows made by a thread of this process and put on a ``queue.Queue`` (a monitor in
the training process), and rows made by a worker process and put on a ``multiprocessing.Queue``
(data-loader workers). The rows are shaped like SystemMonitor events (15 values, the network pair
nested). Each run: both sides started and idle, then the clock runs from the producer's first
``put`` until every row is safe (journaled, or in the child's list).

Reported per receiver: rows/s (median and range over interleaved repeats), the ratio to the
pure-Python design, CPU per row in this process and in total (this process plus the receiving
child; the producer's own CPU is left out), and memory held per row (journal bytes on disk for
ParentReceiver; the child's RSS growth for the pure-Python design).

    python bench/receiver_bench.py [--rows 100000] [--repeats 5] [--json out.json]

With ``--read-rows N`` it measures reading instead: a journal of N such rows is written, then a
fresh process reads it as the crash dump does (journal → Arrow table → CSV) and reports the
seconds and its peak RSS growth, as a multiple of the journal's size.

    python bench/receiver_bench.py --read-rows 1000000
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

from stroboscope.compat.aitune import ParentReceiver

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
LOCAL = "rows from a thread, queue.Queue"
REMOTE = "rows from a worker process, mp.Queue"
OURS = "ParentReceiver"
PURE = "pure-Python (pickle to child)"


def make_row(i: int) -> dict[str, Any]:
    """A row shaped like a SystemMonitor event (15 values, the network pair nested)."""
    return {
        "step": i,
        "rank": 0,
        "cpu": 37.5 + (i % 7),
        "memory": 41.25,
        "disk": 63.0,
        "network": {"sent": 1_000_000 + 1500 * i, "recv": 2_000_000 + 3000 * i},
        "proc.memory.availableMB": 12_345.6,
        "proc.memory.rssMB": 2_048.5 + i * 1e-3,
        "proc.memory.percent": 3.2,
        "proc.cpu.threads": 24,
        "gpu.0.gpu": 97.0,
        "gpu.0.memory": 55.0,
        "gpu.0.memoryAllocated": 81.5,
        "gpu.0.temp": 66.0,
        "gpu.0.powerWatts": 301.25,
    }


@dataclass
class Run:
    scenario: str
    receiver: str
    rows: int
    seconds: float
    rows_per_s: float
    cpu_us_per_row: float  # this process
    total_cpu_us_per_row: float  # this process + the receiving child
    bytes_per_row: float


def _produce(q: Any, rows: list[dict[str, Any]]) -> None:
    put = q.put
    for row in rows:
        put(row)


def _worker(q: Any, go: Any, n: int) -> None:
    """A producer in its own process: waits for ``go``, then puts ``n`` rows."""
    rows = [make_row(i) for i in range(n)]
    go.wait()
    _produce(q, rows)
    q.close()
    q.join_thread()


class _Source:
    """The rows' queue and producer: a thread here (queue.Queue) or a worker (mp.Queue)."""

    def __init__(self, scenario: str, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.worker: Any = None
        self.thread: threading.Thread | None = None
        if scenario == LOCAL:
            self.q: Any = queue.Queue()
        else:
            ctx = multiprocessing.get_context("spawn")
            self.q = ctx.Queue()
            self.go = ctx.Event()
            self.worker = ctx.Process(target=_worker, args=(self.q, self.go, len(rows)))
            self.worker.start()

    def begin(self) -> None:
        if self.worker is not None:
            self.go.set()
        else:
            self.thread = threading.Thread(target=_produce, args=(self.q, self.rows))
            self.thread.start()

    def end(self) -> None:
        if self.worker is not None:
            self.worker.join()
            self.q.close()
            self.q.join_thread()
        elif self.thread is not None:
            self.thread.join()


def _settle() -> None:
    time.sleep(0.5)  # a spawned worker finishes importing and building its rows


def run_receiver(rows: list[dict[str, Any]], scenario: str) -> Run:
    """stroboscope's ParentReceiver, crash_safe=True."""
    source = _Source(scenario, rows)
    n = len(rows)
    with tempfile.TemporaryDirectory() as tmp:
        receiver = ParentReceiver(source.q, dump_path=os.path.join(tmp, "dump.csv"))
        receiver.start()
        try:
            _settle()
            cpu0, t0 = time.process_time(), time.perf_counter()
            source.begin()
            while receiver.rows_received < n:
                time.sleep(0.0005)
            seconds = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            source.end()
            size = os.path.getsize(receiver.journal_path or "")
        finally:
            receiver.stop()
    return Run(scenario, OURS, n, seconds, n / seconds, cpu / n * 1e6, cpu / n * 1e6, size / n)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_SIZE


def _list_child(rows_in: Connection, control: Connection, n: int) -> None:
    """The pure-Python design's child: unpickle and append every row it is sent."""
    kept: list[Any] = []
    control.send((_rss_bytes(), time.process_time()))
    recv = rows_in.recv
    while len(kept) < n:
        kept.append(recv())
    control.send((_rss_bytes(), time.process_time()))
    control.recv()  # hold the rows until the parent has read the numbers


def _forward(q: Any, conn: Connection, n: int) -> None:
    """The pure-Python design's receiver thread: every row taken is pickled to the child."""
    get, send = q.get, conn.send
    for _ in range(n):
        send(get())


def run_pickle_child(rows: list[dict[str, Any]], scenario: str) -> Run:
    """The pure-Python design: a receiver thread, a pipe, a child process keeping a list."""
    source = _Source(scenario, rows)
    n = len(rows)
    ctx = multiprocessing.get_context("spawn")
    rows_in, rows_out = ctx.Pipe(duplex=False)
    control, child_control = ctx.Pipe()
    child = ctx.Process(target=_list_child, args=(rows_in, child_control, n))
    child.start()
    rss0, child_cpu0 = control.recv()  # the child is imported and waiting
    forward = threading.Thread(target=_forward, args=(source.q, rows_out, n))
    forward.start()
    _settle()
    cpu0, t0 = time.process_time(), time.perf_counter()
    source.begin()
    rss1, child_cpu1 = control.recv()
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    forward.join()
    source.end()
    control.send(True)
    child.join()
    total = cpu + child_cpu1 - child_cpu0
    return Run(
        scenario, PURE, n, seconds, n / seconds, cpu / n * 1e6, total / n * 1e6, (rss1 - rss0) / n
    )


def _read_child(path: str) -> None:
    """In a fresh process: read the journal ``path`` into a table and write it as CSV; print
    the seconds and the peak RSS growth (bytes) as JSON."""
    import resource

    import pyarrow.csv as pacsv
    from stroboscope.compat.aitune._journal import read_journal

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    table = read_journal(path)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pacsv.write_csv(table, os.path.join(tmp, "dump.csv"))
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"read_s": t1 - t0, "csv_s": t2 - t1, "peak_growth": peak - base}))


def bench_read(n: int) -> int:
    """Write a journal of ``n`` rows, read it in a fresh process, print one line of results."""
    import subprocess

    from stroboscope.compat.aitune._journal import encode_rows

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "journal.jsonl")
        with open(path, "wb") as f:
            for start in range(0, n, 10_000):
                f.write(encode_rows([make_row(i) for i in range(start, min(n, start + 10_000))])[0])
        size = os.path.getsize(path)
        out = subprocess.run(
            [sys.executable, __file__, "--read-child", path],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print("rows | journal | read to Arrow | CSV | peak RSS growth | x journal")
    print("--- | --- | --- | --- | --- | ---")
    print(
        f"{n:,} | {size / 2**20:.0f} MiB | {got['read_s']:.1f} s | {got['csv_s']:.1f} s | "
        f"{got['peak_growth'] / 2**20:.0f} MiB | {got['peak_growth'] / size:.1f}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--read-rows", type=int, default=0, help="measure reading N rows")
    parser.add_argument("--read-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per run (default 100000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    parser.add_argument("--json", default=None, help="also write the raw runs to this file")
    args = parser.parse_args(argv)
    if args.read_child:
        _read_child(args.read_child)
        return 0
    if args.read_rows:
        return bench_read(args.read_rows)
    rows = [make_row(i) for i in range(args.rows)]

    jobs: list[Callable[[], Run]] = []
    for scenario in (LOCAL, REMOTE):
        jobs.append(functools.partial(run_receiver, rows, scenario))
        jobs.append(functools.partial(run_pickle_child, rows, scenario))
    runs: list[Run] = []
    for repeat in range(args.repeats):
        k = repeat % len(jobs)  # rotate so that no configuration always runs first
        runs.extend(job() for job in jobs[k:] + jobs[:k])

    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
    print(f"{args.rows} rows per run, medians of {args.repeats} interleaved runs")
    print()
    print(
        "scenario | receiver | rows/s (min..max) | vs pure-Python | CPU/row here | "
        "CPU/row total | memory per row"
    )
    print("--- | --- | --- | --- | --- | --- | ---")
    for scenario in (LOCAL, REMOTE):
        mine = {
            name: [r for r in runs if r.scenario == scenario and r.receiver == name]
            for name in (OURS, PURE)
        }
        rate = {name: statistics.median(r.rows_per_s for r in rs) for name, rs in mine.items()}
        for name, rs in mine.items():
            lo, hi = min(r.rows_per_s for r in rs), max(r.rows_per_s for r in rs)
            here = statistics.median(r.cpu_us_per_row for r in rs)
            total = statistics.median(r.total_cpu_us_per_row for r in rs)
            per_row = statistics.median(r.bytes_per_row for r in rs)
            what = "journal on disk" if name == OURS else "child RSS"
            print(
                f"{scenario} | {name} | {rate[name]:,.0f} ({lo:,.0f}..{hi:,.0f}) | "
                f"{rate[name] / rate[PURE]:.2f}x | {here:.2f} µs | {total:.2f} µs | "
                f"{per_row:.0f} B ({what})"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": args.rows, "runs": [asdict(r) for r in runs]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
