"""The Chrome Trace Event JSON as read: a torch.profiler trace (``.json``, or gzip for
``.json.gz``), or one of ours. One reader for every room that takes such a file in (the merge
into a torch trace, the attribution of GPU energy to its kernels).

Times (torch >= 2.4): the top-level ``baseTimeNanoseconds`` is a CLOCK_REALTIME instant in ns,
and every event's ``ts``/``dur`` is in microseconds relative to it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.files import open_regular_file, replace_private

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "base_time_ns",
    "complete_events",
    "read_trace",
    "us_text",
    "write_trace",
]


def read_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The trace at ``path`` as its JSON object (gunzipped when the name ends in ``.gz``).

    Raises
    ------
    ValueError
        ``path`` is not a regular file (a FIFO is refused, not awaited), or its JSON is not an
        object with a ``traceEvents`` list.
    """
    p = os.fspath(path)
    with open_regular_file(p, "trace") as f:
        data = f.read()
    trace = json.loads(gzip.decompress(data) if p.endswith(".gz") else data)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"{p} is not a Chrome trace object with a 'traceEvents' list")
    return trace


def base_time_ns(trace: dict[str, Any], path: str | os.PathLike[str]) -> int:
    """The trace's ``baseTimeNanoseconds`` (realtime ns of its ``ts`` zero).

    Raises
    ------
    ValueError
        Naming ``path``, when the trace has no integer ``baseTimeNanoseconds`` (torch < 2.4:
        its times cannot be placed on the realtime clock).
    """
    base = trace.get("baseTimeNanoseconds")
    if not isinstance(base, int):
        raise ValueError(
            f"{os.fspath(path)} has no integer 'baseTimeNanoseconds' (written by torch >= 2.4): "
            "its timestamps cannot be placed on the realtime clock"
        )
    return base


def complete_events(
    trace: dict[str, Any], base_ns: int, categories: Sequence[str]
) -> tuple[list[str], list[str], pa.Int64Array, pa.Int64Array]:
    """Every complete event (``"ph": "X"`` with a ``ts``) of ``categories``: its category, its
    name, and its realtime start and end in ns (``base_ns + ts·1000``, rounded half to even; a
    missing ``dur`` is 0)."""
    wanted = set(categories)
    cats: list[str] = []
    names: list[str] = []
    ts: list[float] = []
    dur: list[float] = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in wanted and "ts" in e:
            cats.append(e["cat"])
            names.append(str(e.get("name", "")))
            ts.append(float(e["ts"]))
            dur.append(float(e.get("dur", 0.0)))
    begin = pc.add(_ns(ts), pa.scalar(base_ns, pa.int64()))
    end = pc.add(begin, _ns(dur))
    return cats, names, begin, end


def _ns(us: list[float]) -> pa.Int64Array:
    """Microseconds as whole ns, rounded half to even."""
    scaled = pc.multiply(pa.array(us, pa.float64()), 1000.0)
    return pc.round(scaled, round_mode="half_to_even").cast(pa.int64())


# ---- writing: the file around the events (the events of a recording: analysis.trace_data) ----


def us_text(ns: int) -> str:
    """ns as a JSON number of microseconds with ns precision (exact: integer arithmetic)."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def write_trace(path: str | os.PathLike[str], head: dict[str, Any], events: Iterator[str]) -> None:
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
