"""Scope events: the cost of an ``events_begin`` + ``events_end`` pair from Python, beside a
``time.perf_counter_ns()`` pair (the cheapest timing a pure-Python scope can do), and how many
events one thread records per second without losing any while it drains the log as it goes.

Runs standalone: ``python bench/events_bench.py [--pairs N] [--repeats R]``. Prints medians
over the repeats and the CPU model; nothing is written.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

from bench_common import cpu_model
from stroboscope import _core


def loop_ns(body: Callable[[int], None], n: int, repeats: int) -> float:
    """Median ns per iteration of ``body(n)`` (which runs n iterations) over ``repeats`` runs."""
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        body(n)
        per.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(per)


def empty(n: int) -> None:
    for _ in range(n):
        pass


def clock_pair(n: int) -> None:
    p = time.perf_counter_ns
    for _ in range(n):
        p()
        p()


def event_pair(n: int) -> None:
    b, e = _core.events_begin, _core.events_end
    for _ in range(n):
        b(1, 0, 0, 7)
        e(1, 0, 0, 7)


def drain_rate(total: int, chunk: int) -> tuple[float, int, int]:
    """Events/s of one thread pushing ``total`` events and reading the log every ``chunk``
    events (as the segment writer would); returns (rate, events read, events lost)."""
    b = _core.events_begin
    cursor = _core.events_written()
    read = lost = 0
    t0 = time.perf_counter_ns()
    for _ in range(total // chunk):
        for _ in range(chunk):
            b(1, 0, 0, 7)
        batch = _core.events_read(cursor)
        read += len(batch)
        lost += batch.lost
        cursor = batch.next
    elapsed = time.perf_counter_ns() - t0
    return total / (elapsed / 1e9), read, lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--events", type=int, default=4_000_000)
    args = ap.parse_args()
    _core.events_begin(0, 0, 0, 0)  # the ring is mapped by the first event: not timed
    loop = loop_ns(empty, args.pairs, args.repeats)
    clock = loop_ns(clock_pair, args.pairs, args.repeats)
    pair = loop_ns(event_pair, args.pairs, args.repeats)
    rates = [drain_rate(args.events, 100_000) for _ in range(3)]
    rate, read, lost = sorted(rates)[1]
    print(f"CPU: {cpu_model()}  Python {platform.python_version()}")
    print(f"events capacity: {_core.events_stats()['capacity']:,}")
    print(f"empty loop                       {loop:7.1f} ns/iteration")
    print(f"perf_counter_ns() pair           {clock:7.1f} ns ({clock - loop:.1f} without the loop)")
    print(f"events_begin + events_end pair   {pair:7.1f} ns ({pair - loop:.1f} without the loop)")
    print(f"pair / perf_counter pair         {(pair - loop) / (clock - loop):7.2f}x")
    print(
        f"one thread, drained every 100k:  {rate / 1e6:7.2f} M events/s "
        f"({read:,} read, {lost} lost)"
    )


if __name__ == "__main__":
    main()
