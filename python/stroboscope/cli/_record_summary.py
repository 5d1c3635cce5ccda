"""What ``stroboscope record`` says once the recording ended: the summary (rows, the sampler's
measurement of itself, failed segment writes, the dataset's parts, sources that failed, the
scopes called, the column statistics), and the error when FILE could not be written.

Part of :mod:`stroboscope.cli.record` (which imports these names).
"""

from __future__ import annotations

import argparse
import shlex
from typing import NoReturn

from stroboscope._base.identity import Identity
from stroboscope.analysis.column_stats import fmt_seconds
from stroboscope.cli import _dataset
from stroboscope.recording import _finish
from stroboscope.recording.segments import SegmentStatus
from stroboscope.recording.watchdog import Watchdog
from stroboscope.sampling import SamplerStats


def _print_summary(
    args: argparse.Namespace,
    fmt: str | None,
    rows: int,
    columns: int,
    span_s: float,
    sampled_s: float,
    stats: SamplerStats,
    summary: str,
    segments: SegmentStatus | None = None,
    dataset: SegmentStatus | None = None,
    who: Identity | None = None,
    scopes: str | None = None,
) -> None:
    where = f"{args.output} ({fmt})" if args.output is not None else f"{args.dataset} (dataset)"
    print(
        f"recorded {rows} rows x {columns} columns over {fmt_seconds(span_s)} (first to last "
        f"row) to {where}"
    )
    print(
        f"sampler: interval {fmt_seconds(args.interval)}, sampled for {fmt_seconds(sampled_s)}, "
        f"ticks taken {stats.ticks_taken}, "
        f"missed {stats.ticks_missed}, lateness p50/p99 "
        f"{stats.lateness_p50_ns / 1e3:.1f}/{stats.lateness_p99_ns / 1e3:.1f} µs, "
        f"cost/tick {stats.cost_mean_ns / 1e3:.1f} µs, "
        f"sampler CPU {100 * stats.thread_cpu_ns / 1e9 / max(sampled_s, 1e-9):.2f} %, "
        f"rows lost {stats.segment_rows_lost or 0}"
    )
    if segments is not None and segments.errors:
        print(
            f"segment writes failed {segments.errors} times (last: {segments.last_error}); "
            f"the output was read from the spool, which held those rows"
        )
    if args.dataset is not None and dataset is not None and who is not None:
        for line in _dataset.status_lines(args, who, dataset):
            print(line)
    for src in stats.sources:
        if src.reason:
            print(f"source {src.name}: {src.reason} ({src.failures} failed reads)")
    if scopes is not None:
        print(scopes)
    print()
    print(summary)


def _scopes_line(args: argparse.Namespace, done: _finish.Finished) -> str:
    """The summary's line on the scopes the recorded processes called (and the edges lost)."""
    from stroboscope.formats.shared_events import EVENTS_CAPACITY_ENV

    lost = (
        f"; {done.scope_edges_lost:,} scope edges lost (a process's events ring lapped before the "
        f"end read it, or an edge was never finished): {EVENTS_CAPACITY_ENV} sets a larger ring"
        if done.scope_edges_lost
        else ""
    )
    if done.scope_calls == 0:
        return (
            "scopes: none called (stroboscope.annotate, or NVTX ranges, in the command and the "
            "processes it starts are recorded)" + lost
        )
    where = [p for p in (done.scopes,) if p is not None]
    if args.dataset is not None:
        where.append(f"the scopes of dataset {args.dataset}")
    return (
        f"scopes: {done.scope_calls} calls recorded"
        + (f" to {' and '.join(where)}" if where else "")
        + lost
    )


def _unwritten(
    exc: OSError, output: str, spool: str, rows: int, watchdog: Watchdog | None
) -> NoReturn:
    """FILE could not be written at the end: stop the watchdog (this process did not die; it
    would try the same write again), keep the spool, and say how to recover the rows."""
    if watchdog is not None:
        watchdog.stop()
    reason = exc.strerror or str(exc)
    raise RuntimeError(
        f"cannot write -o {output!r} ({reason}); the {rows} rows are safe in the spool "
        f"{spool!r}: write them with: stroboscope recover {shlex.quote(spool)} -o FILE"
    ) from None
