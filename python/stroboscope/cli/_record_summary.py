"""What ``stroboscope record`` says once the recording ended: the summary (rows, the sampler's
measurement of itself, failed segment writes, the dataset's parts, sources that failed, the
scopes called, the column statistics; one line in a rank other than 0 of a launcher's several),
and the error when FILE could not be written.

Part of :mod:`stroboscope.cli.record` (which imports these names).
"""

from __future__ import annotations

import argparse
import shlex
from typing import NoReturn

from stroboscope._base.identity import Identity, detect_identity
from stroboscope._base.text import fmt_seconds
from stroboscope.cli import _dataset
from stroboscope.recording import Finished
from stroboscope.recording.segments import SegmentStatus
from stroboscope.recording.watchdog import Watchdog
from stroboscope.sampling import SamplerStats


def print_summary(
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
    recorded = (
        f"recorded {rows} rows x {columns} columns over {fmt_seconds(span_s)} (first to last "
        f"row) to {where}"
    )
    rank, world = _rank_of(who)
    brief = world > 1 and rank != 0  # one line per rank (and what went wrong); rank 0 the rest
    if brief:
        failed = [f"{s.name} ({s.reason})" for s in stats.sources if s.reason]
        print(
            f"rank {rank} of {world}: {recorded}; ticks missed {stats.ticks_missed} of "
            f"{stats.ticks_scheduled}"
            + (f"; failing sources: {', '.join(failed)}" if failed else "")
        )
    else:
        print(recorded)
        print(
            f"sampler: interval {fmt_seconds(args.interval)}, "
            f"sampled for {fmt_seconds(sampled_s)}, ticks taken {stats.ticks_taken}, "
            f"missed {stats.ticks_missed}, lateness p50/p99 "
            f"{stats.lateness_p50_ns / 1e3:.1f}/{stats.lateness_p99_ns / 1e3:.1f} µs, "
            f"cost/tick {stats.cost_mean_ns / 1e3:.1f} µs, "
            f"sampler CPU {100 * stats.thread_cpu_ns / 1e9 / max(sampled_s, 1e-9):.2f} %, "
            f"rows lost {stats.segment_rows_lost or 0}"
        )
    # What went wrong, and where a rank's dataset parts went, is said by every rank.
    if segments is not None and segments.errors:
        held = (
            f"the ring overwrote {segments.rows_lost} rows meanwhile: they are lost, the output "
            "holds the rest (read from the spool)"
            if segments.rows_lost
            else "the output was read from the spool, which held those rows"
        )
        print(
            f"segment writes failed {segments.errors} times (last: {segments.last_error}); {held}"
        )
    if args.dataset is not None and dataset is not None and who is not None:
        for line in _dataset.status_lines(args, who, dataset):
            print(line)
    if brief:
        return
    for src in stats.sources:
        if src.reason:
            print(f"source {src.name}: {src.reason} ({src.failures} failed reads)")
    if scopes is not None:
        print(scopes)
    if world > 1:
        print(f"rank {rank} of {world}; the other ranks print a line each")
    print()
    print(summary)


def _rank_of(who: Identity | None) -> tuple[int | None, int]:
    """This process's rank and the world size (1 where unknown), from ``who`` or else from
    the launcher's variables (conflicting ones: unknown)."""
    if who is None:
        try:
            who = detect_identity()
        except ValueError:
            return None, 1
    return who.rank, who.world_size or 1


def scopes_line(args: argparse.Namespace, done: Finished, unmade: int = 0) -> str:
    """The summary's line on the scopes the recorded processes called (and the edges lost, the
    ``unmade`` processes that could not make their events file, and the events files damaged
    or skipped)."""
    from stroboscope.formats.shared_events import EVENTS_CAPACITY_ENV

    lost = (
        f"; {done.scope_edges_lost:,} scope edges lost (a process's events ring lapped before the "
        f"end read it, or an edge was never finished): {EVENTS_CAPACITY_ENV} sets a larger ring"
        if done.scope_edges_lost
        else ""
    )
    if unmade:
        who, their = ("processes", "their") if unmade > 1 else ("process", "its")
        lost += (
            f"; {unmade} {who} could not make {their} events file (no space left in the "
            f"temporary directory, or a file size limit): {their} scopes are not recorded"
        )
    if done.scope_files_damaged:
        n = len(done.scope_files_damaged)
        lost += (
            f"; {n} events {'files' if n > 1 else 'file'} damaged or skipped "
            f"({done.scope_files_damaged[0]}"
            + (f"; and {n - 1} more" if n > 1 else "")
            + "): the scopes' metadata lists each (events_files)"
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


def unwritten(
    exc: Exception,
    output: str | None,
    spool: str,
    rows: int,
    watchdog: Watchdog | None,
    lost: str = "",
    events_dir: str | None = None,
) -> NoReturn:
    """FILE could not be written at the end (an OSError, or anything else that failed in the
    end's work): stop the watchdog (this process did not die; it would try the same write
    again), keep the spool, and say how to recover the rows, and ``lost`` (the rows the spool
    does not hold, said with their causes: a full disk that failed the segments); the
    command's scope events are kept in ``events_dir`` (when given), and recover reads them."""
    if watchdog is not None:
        watchdog.stop()
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
    else:
        reason = f"{type(exc).__name__}: {exc}"
    what = "the end of the recording failed" if output is None else f"cannot write -o {output!r}"
    raise RuntimeError(
        f"{what} ({reason}); the {rows} rows are safe in the spool "
        f"{spool!r}: write them with: stroboscope recover {shlex.quote(spool)} -o FILE"
        + (f"; {lost}" if lost else "")
        + (
            f"; the command's scope events are kept in {events_dir!r} (recover reads them)"
            if events_dir is not None
            else ""
        )
    ) from None
