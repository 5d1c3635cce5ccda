"""What a trace shows, on the realtime clock: scope slices per thread and metric counters.

Shared by the Chrome JSON writer and the Perfetto protobuf writer, so both show the same things.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stroboscope._base.checks import check_path
from stroboscope.analysis._intervals import check_intervals
from stroboscope.analysis._series import (
    GPU_READ,
    I64,
    Series,
    anchor_of,
    check_samples,
    is_read_time,
    mono,
    series,
)
from stroboscope.formats.chrome_trace import us_text, write_trace

_NOT_METRICS = ("time", "mono_ns", GPU_READ)


@dataclass(frozen=True)
class Slices:
    """Scope calls: realtime begin/end (ns), name, thread, stack, and labels (+ path) as args."""

    begin: I64
    end: I64
    name: list[str]
    thread: I64
    stack: list[int]
    depth: I64
    args: list[dict[str, str]]


@dataclass(frozen=True)
class TraceData:
    pid: int
    anchor: int  # realtime ns minus monotonic ns
    slices: Slices
    counters: list[Series]  # times already realtime ns


def metric_columns(samples: pa.Table, columns: Sequence[str] | None) -> list[str]:
    """``columns`` checked against the frame, or every numeric metric column of it."""
    if columns is None:
        return [
            f.name
            for f in samples.schema
            if f.name not in _NOT_METRICS
            and not is_read_time(f.name)
            and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
        ]
    if isinstance(columns, str):
        raise TypeError("columns must be a sequence of column names, not one string")
    missing = [c for c in columns if c not in samples.column_names]
    if missing:
        raise ValueError(f"columns not in samples: {', '.join(missing)}")
    return list(columns)


def collect(
    samples: pa.Table,
    intervals: pa.Table,
    *,
    columns: Sequence[str] | None,
    anchor_realtime_ns: int | None,
    pid: int | None,
) -> TraceData:
    """Everything a trace shows, with times turned to realtime ns (``mono + anchor``).

    A call still open is drawn up to the last sample (or its begin, if later) with
    ``open: "true"`` among its args.
    """
    samples = check_samples(samples)
    iv = check_intervals(intervals)
    anchor = anchor_of(samples, intervals, anchor_realtime_ns)
    t = mono(samples)
    last = int(t[-1]) if len(t) else 0
    end = np.where(iv.closed, iv.end, np.maximum(iv.begin, last))
    table = iv.table
    labels = {k: table.column(k).to_pylist() for k in iv.labels}
    paths = table.column("path").to_pylist()
    open_rows = (~iv.closed).tolist()
    args: list[dict[str, str]] = []
    for row, path in enumerate(paths):
        a = {k: str(v[row]) for k, v in labels.items() if v[row] is not None}
        a["path"] = path
        if open_rows[row]:
            a["open"] = "true"
        args.append(a)
    slices = Slices(
        begin=iv.begin + anchor,
        end=end + anchor,
        name=table.column("name").to_pylist(),
        thread=np.asarray(table.column("thread_id").cast(pa.int64()).to_numpy(), dtype=np.int64),
        stack=table.column("stack_id").cast(pa.uint64()).to_pylist(),
        depth=iv.depth,
        args=args,
    )
    counters = []
    for c in metric_columns(samples, columns):
        s = series(samples, c)
        finite = np.isfinite(s.v)
        counters.append(Series(c, s.t[finite] + anchor, s.v[finite]))
    return TraceData(os.getpid() if pid is None else int(pid), anchor, slices, counters)


def trace_events(data: TraceData, base_ns: int, process_name: str) -> Iterator[str]:
    """The trace events as JSON texts, times relative to ``base_ns``."""
    pid = data.pid
    dumps = json.dumps
    yield dumps(
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process_name}}
    )
    s = data.slices
    for tid in sorted(set(s.thread.tolist())):
        yield dumps(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"thread {tid}"},
            }
        )
    begin = (s.begin - base_ns).tolist()
    dur = (s.end - s.begin).tolist()
    tids = s.thread.tolist()
    for b, d, name, tid, args in zip(begin, dur, s.name, tids, s.args):
        yield (
            f'{{"ph": "X", "cat": "scope", "name": {dumps(name)}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {us_text(b)}, "dur": {us_text(d)}, "args": {dumps(args)}}}'
        )
    for c in data.counters:
        head = f'{{"ph": "C", "cat": "metric", "name": {dumps(c.name)}, "pid": {pid}, "ts": '
        mid = f', "args": {{{dumps(c.name)}: '
        for t, v in zip((c.t - base_ns).tolist(), c.v.tolist()):
            yield f"{head}{us_text(t)}{mid}{v!r}}}}}"


def default_base(data: TraceData) -> int:
    """The earliest time in the trace, rounded down to a whole second (as torch does)."""
    starts = [int(data.slices.begin.min())] if len(data.slices.begin) else []
    starts += [int(c.t[0]) for c in data.counters if len(c.t)]
    first = min(starts) if starts else 0
    return first - first % 1_000_000_000


def write_chrome_trace(
    path: str | os.PathLike[str],
    samples: pa.Table,
    intervals: pa.Table,
    *,
    columns: Sequence[str] | None = None,
    anchor_realtime_ns: int | None = None,
    pid: int | None = None,
    process_name: str = "stroboscope",
) -> None:
    """Write scopes and metrics as a Chrome Trace Event JSON file (``.json``, or gzip for
    ``.json.gz``), created 0600 and replaced whole.

    Parameters
    ----------
    path : str or PathLike
        The output file.
    samples : pyarrow.Table
        A sample frame (``Frame.to_arrow()``).
    intervals : pyarrow.Table
        Scope calls in the scope-intervals schema.
    columns : sequence of str, optional
        Metric columns to draw as counter tracks (default: every numeric metric column).
    anchor_realtime_ns : int, optional
        Realtime ns minus monotonic ns. Default: the intervals' metadata, else the frame's
        ``time - mono_ns``.
    pid : int, optional
        The ``pid`` of every event (default: this process's id).
    process_name : str
        The name shown for that process.
    """
    path = check_path("path", path)  # before any work
    data = collect(
        samples, intervals, columns=columns, anchor_realtime_ns=anchor_realtime_ns, pid=pid
    )
    base = default_base(data)
    head = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "otherData": {"producer": "stroboscope", "clock": "CLOCK_REALTIME"},
    }
    write_trace(path, head, trace_events(data, base, process_name))
