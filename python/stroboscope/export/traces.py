"""Chrome Trace Event JSON (loaded by Perfetto and chrome://tracing), and merging into a
torch.profiler trace.

Timestamps follow torch.profiler (torch >= 2.4): the top-level ``baseTimeNanoseconds`` is a
CLOCK_REALTIME instant in ns, and every event's ``ts``/``dur`` is in microseconds relative to it.
Realtime is ``mono_ns`` plus the sampler's clock anchor, so a trace of ours and one of torch's
line up by subtracting their base times, nothing else.

What a trace holds: each scope call as a complete event (``"ph": "X"``, ``cat`` ``"scope"``,
``args`` its labels and path) on its thread (``tid`` = OS thread id); each metric column as a
counter track (``"ph": "C"``, one series per event, named after the column); the process and
thread names as metadata events (``"ph": "M"``). GPU values are placed at the moment NVML was
read (``gpu.read_mono_ns``), the rest at their row's ``mono_ns``.

Limitation: Chrome JSON has one track per ``tid``, so the calls of several asyncio tasks of one
thread share it and may overlap without nesting there; the Perfetto protobuf trace
(:func:`write_perfetto_trace`) gives each further stack of a thread its own track.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any, Union

import pyarrow as pa

from stroboscope._base.checks import check_path
from stroboscope._base.files import replace_private
from stroboscope.export._trace_data import TraceData, collect
from stroboscope.export.perfetto import write_perfetto_trace
from stroboscope.formats.chrome_trace import base_time_ns, read_trace

__all__ = ["merge_into_trace", "write_chrome_trace", "write_perfetto_trace"]

PathLike = Union[str, "os.PathLike[str]"]


def _us(ns: int) -> str:
    """ns as a JSON number of microseconds with ns precision (exact: integer arithmetic)."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def _events(data: TraceData, base_ns: int, process_name: str) -> Iterator[str]:
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
            f'"ts": {_us(b)}, "dur": {_us(d)}, "args": {dumps(args)}}}'
        )
    for c in data.counters:
        head = f'{{"ph": "C", "cat": "metric", "name": {dumps(c.name)}, "pid": {pid}, "ts": '
        mid = f', "args": {{{dumps(c.name)}: '
        for t, v in zip((c.t - base_ns).tolist(), c.v.tolist()):
            yield f"{head}{_us(t)}{mid}{v!r}}}}}"


def _default_base(data: TraceData) -> int:
    """The earliest time in the trace, rounded down to a whole second (as torch does)."""
    starts = [int(data.slices.begin.min())] if len(data.slices.begin) else []
    starts += [int(c.t[0]) for c in data.counters if len(c.t)]
    first = min(starts) if starts else 0
    return first - first % 1_000_000_000


def _write(path: PathLike, head: dict[str, Any], events: Iterator[str]) -> None:
    opener = gzip.GzipFile if os.fspath(path).endswith(".gz") else None
    with replace_private(path) as raw:
        f = opener(fileobj=raw, mode="wb") if opener else raw
        text = json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n'
        f.write(text.encode())
        first = True
        for e in events:
            f.write((e if first else ",\n" + e).encode())
            first = False
        f.write(b"\n]}\n")
        if opener:
            f.close()


def write_chrome_trace(
    path: PathLike,
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
    base = _default_base(data)
    head = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "otherData": {"producer": "stroboscope", "clock": "CLOCK_REALTIME"},
    }
    _write(path, head, _events(data, base, process_name))


def merge_into_trace(
    torch_trace_in: PathLike,
    out: PathLike,
    samples: pa.Table,
    intervals: pa.Table,
    *,
    columns: Sequence[str] | None = None,
    anchor_realtime_ns: int | None = None,
    pid: int | None = None,
    process_name: str = "stroboscope",
) -> None:
    """Add our scope and metric tracks to a torch.profiler trace, keeping its events as they are.

    Our events are placed on the trace's own ``baseTimeNanoseconds`` (torch >= 2.4 writes it):
    ``ts = (realtime_ns - baseTimeNanoseconds) / 1000``. They go under their own ``pid`` (by
    default one more than the largest integer pid in the trace), so the scopes never interleave
    with torch's ops on one track. ``out`` is written whole (gzip when it ends in ``.gz``).

    Raises
    ------
    ValueError
        When the trace has no ``baseTimeNanoseconds`` (torch < 2.4: its times cannot be placed
        on the realtime clock).
    """
    trace = read_trace(torch_trace_in)
    base = base_time_ns(trace, torch_trace_in)
    if pid is None:
        pids = [e["pid"] for e in trace["traceEvents"] if isinstance(e.get("pid"), int)]
        pid = max(pids, default=0) + 1
    data = collect(
        samples, intervals, columns=columns, anchor_realtime_ns=anchor_realtime_ns, pid=pid
    )
    events = trace.pop("traceEvents")
    theirs = (json.dumps(e) for e in events)

    def both() -> Iterator[str]:
        yield from theirs
        yield from _events(data, base, process_name)

    _write(check_path("out", out), trace, both())
