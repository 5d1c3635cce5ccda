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

import json
import os
from collections.abc import Iterator, Sequence
from typing import Union

import pyarrow as pa

from stroboscope._base.checks import check_path
from stroboscope.analysis.trace_data import collect, trace_events, write_chrome_trace
from stroboscope.export.perfetto import write_perfetto_trace
from stroboscope.formats.chrome_trace import base_time_ns, read_trace, write_trace

__all__ = ["merge_into_trace", "write_chrome_trace", "write_perfetto_trace"]

PathLike = Union[str, "os.PathLike[str]"]


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
    A scope around one op and that op agree within 10 to 20 µs (tests/export/test_traces_torch.py).

    Parameters
    ----------
    torch_trace_in : str or PathLike
        A torch.profiler Chrome trace (``prof.export_chrome_trace(...)``; ``.json`` or
        ``.json.gz``).
    out : str or PathLike
        The merged trace (created 0600, replaced whole).
    samples : pyarrow.Table
        The sample frame recorded while the profiler ran (``Frame.to_arrow()``).
    intervals : pyarrow.Table
        Scope calls in the scope-intervals schema (``Sampler.scope_intervals()``).
    columns : sequence of str, optional
        Metric columns to draw as counter tracks (default: every numeric metric column).
    anchor_realtime_ns : int, optional
        Realtime ns minus monotonic ns. Default: the intervals' metadata, else the frame's
        ``time - mono_ns``.
    pid : int, optional
        The ``pid`` of our events (default: one more than the trace's largest).
    process_name : str
        The name shown for that process.

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
        yield from trace_events(data, base, process_name)

    write_trace(check_path("out", out), trace, both())
