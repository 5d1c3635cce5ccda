"""Sample rows in aitune's columns, units and dtypes.

aitune 0.6.0 builds each row as a dict (psutil, then torch, then NVML readings, then the scope
and context fields) and turns the list into a DataFrame, so its columns come in this order:

=================================== ============================= ===================
aitune column                        from                          dtype (unit)
=================================== ============================= ===================
``host_cpu_percent``                 ``cpu.util_pct``              float64 (%)
``host_memory_used``                 ``mem.used_bytes``            int64 (bytes)
``host_memory_free``                 ``mem.available_bytes``       int64 (bytes)
``torch_allocated``                  torch.cuda.memory_allocated   int64 (bytes)
``torch_reserved``                   torch.cuda.memory_reserved    int64 (bytes)
``cuda:{i}_memory_used``             ``gpu.{i}.mem_used_bytes``    int64 (bytes)
``cuda:{i}_memory_free``             ``gpu.{i}.mem_free_bytes``    int64 (bytes)
``cuda:{i}_memory_total``            ``gpu.{i}.mem_total_bytes``   int64 (bytes)
``cuda:{i}_utilization``             ``gpu.{i}.util_pct``          int64 (%)
``cuda:{i}_power_usage_milliwatts``  ``gpu.{i}.power_w`` * 1000    int64 (mW)
``scope``                            innermost open scope          str
``module_name``, ``backend``         its labels module, backend    str or None
``timestamp``                        ``mono_ns`` - session start   float64 (s)
=================================== ============================= ===================

``{i}`` is the NVML index, as in aitune. The GPU is read on its own thread, so a row between two
readings carries the latest one (and the first rows of a session, before its first reading, that
one). A null cell otherwise (a reading that failed) makes its integer column float64 with NaN,
as pandas does for aitune's dicts. ``host_cpu_percent`` is NaN on a row taken before the
kernel's CPU tick counters moved since the row before it (an edge row right after a sample):
psutil says 0.0 there, a figure no CPU time was counted for. The torch figures are read when a
scope opens, and only once this process has initialised CUDA through torch; until then (or
without torch) they are 0, which is what torch reports when CUDA is not initialised.
"""

from __future__ import annotations

import heapq
import re
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from stroboscope.compat.aitune._collector import Edge as Edge

if TYPE_CHECKING:
    import pandas

HOST_COLUMNS = ("host_cpu_percent", "host_memory_used", "host_memory_free")
TORCH_COLUMNS = ("torch_allocated", "torch_reserved")
CONTEXT_COLUMNS = ("scope", "module_name", "backend", "timestamp")
_GPU = (  # aitune suffix, stroboscope metric, scale
    ("memory_used", "mem_used_bytes", 1),
    ("memory_free", "mem_free_bytes", 1),
    ("memory_total", "mem_total_bytes", 1),
    ("utilization", "util_pct", 1),
    ("power_usage_milliwatts", "power_w", 1000),
)
_GPU_INDEX = re.compile(r"gpu\.(\d+)\.[a-z_]+")  # a device metric (not gpu.{i}.mig.{j}.*)


def torch_memory() -> tuple[int, int] | None:
    """torch's allocated and reserved bytes, when torch is imported and CUDA initialised."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        return int(cuda.memory_allocated()), int(cuda.memory_reserved())
    except Exception:  # a broken CUDA state must not fail a scope
        return None


def innermost_scope(mono_ns: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each row time, the index of the most recently opened interval still open then
    (``begin <= t < end``; ``end`` -1 = still open), or -1 when none is.

    The most recently opened one is aitune's "innermost": its collector keeps one stack of
    scope names per process. Row times must be sorted. (The general as-of join of samples to
    scopes is :mod:`stroboscope.analysis`'s; this is the one rule aitune's rows need.)
    """
    t = np.asarray(mono_ns, dtype=np.int64)
    b = np.asarray(begin, dtype=np.int64)
    e = np.where(np.asarray(end, dtype=np.int64) < 0, np.iinfo(np.int64).max, end)
    # Only intervals that contain at least one row can be anyone's answer.
    keep = np.flatnonzero(np.searchsorted(t, b, "left") < np.searchsorted(t, e, "left"))
    keep = keep[np.argsort(b[keep], kind="stable")]
    out = np.full(len(t), -1, dtype=np.int64)
    heap: list[tuple[int, int, int]] = []  # (-begin, -index, end): latest begin on top
    k = 0
    for row, now in enumerate(t.tolist()):
        while k < len(keep) and b[keep[k]] <= now:
            i = int(keep[k])
            heapq.heappush(heap, (-int(b[i]), -i, int(e[i])))
            k += 1
        while heap and heap[0][2] <= now:  # ended: it can never be the answer again
            heapq.heappop(heap)
        if heap:
            out[row] = -heap[0][1]
    return out


def _ints(values: np.ndarray) -> np.ndarray:
    """int64 when every cell is known, else float64 with NaN (pandas' dtype for aitune's dicts)."""
    out: np.ndarray = values.astype(np.float64)
    if not np.isnan(out).any():
        out = np.rint(out).astype(np.int64)
    return out


def _column(frame: pa.Table, name: str, *, latest: bool = False) -> np.ndarray:
    """Column ``name`` as float64 (NaN = null); with ``latest``, a null cell takes the latest
    reading before it (the GPU is polled on its own thread: a row can fall between two
    readings), and the rows before the first reading take that one (the session's first
    rows can come before its GPU thread has read: aitune's first row has GPU values)."""
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    col = frame.column(name).cast(pa.float64())
    values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    known = np.flatnonzero(~np.isnan(values))
    if latest and len(known):
        at = np.where(np.isnan(values), known[0], np.arange(len(values)))
        values = values[np.maximum.accumulate(at)]
    return values


# (taken before the scope opened, read at, scope name, allocated, reserved), all times mono ns
Reading = tuple[int, int, str, int, int]


def stamp_readings(readings: list[Reading], intervals: pa.Table) -> list[tuple[int, int, int]]:
    """``(mono_ns, allocated, reserved)`` of each reading, timed at the begin of the scope it
    was read for (the earliest interval of its name that began between the two times), so
    that every row of that scope reads it; at the reading's own time when none is found."""
    begin = np.asarray(intervals.column("begin_ns").to_numpy(zero_copy_only=False), np.int64)
    order = np.argsort(begin, kind="stable")
    begin, names = begin[order], intervals.column("name")
    out = []
    for opened_ns, now, name, allocated, reserved in readings:
        lo, hi = np.searchsorted(begin, opened_ns, "left"), np.searchsorted(begin, now, "right")
        found = (int(begin[k]) for k in range(lo, hi) if names[int(order[k])].as_py() == name)
        out.append((next(found, now), allocated, reserved))
    return out


def _torch_at(t: np.ndarray, readings: list[tuple[int, int, int]]) -> tuple[Any, Any]:
    if not readings:
        zeros = np.zeros(len(t), dtype=np.int64)
        return zeros, zeros.copy()
    stamps = np.array([r[0] for r in readings], dtype=np.int64)
    at = np.searchsorted(stamps, t, "right") - 1
    alloc = np.array([0] + [r[1] for r in readings], dtype=np.int64)
    reserved = np.array([0] + [r[2] for r in readings], dtype=np.int64)
    return alloc[at + 1], reserved[at + 1]


def _label(intervals: pa.Table, key: str) -> list[str | None]:
    """The label ``key`` of every interval (None where absent)."""
    if key not in intervals.column_names:
        return [None] * intervals.num_rows
    values: list[str | None] = intervals.column(key).to_pylist()
    return values


def _edge_rows(t: np.ndarray, edges: list[Edge]) -> dict[int, Edge]:
    """Row index -> the edge it serves: the first row at or after each request (the latest
    request wins when requests coalesced into one row)."""
    served: dict[int, Edge] = {}
    for edge in sorted(edges):
        i = int(np.searchsorted(t, edge[0], "left"))
        if i < len(t):
            served[i] = edge
    return served


def aitune_rows(
    frame: pa.Table,
    intervals: pa.Table,
    start_ns: int,
    torch_readings: list[tuple[int, int, int]] | None = None,
    edges: list[Edge] | None = None,
    carried: int = 0,
) -> pandas.DataFrame:
    """The sample rows of ``frame`` taken while a scope of ``intervals`` was open, in aitune's
    columns (see the module's table); ``timestamp`` counts from ``start_ns`` (mono ns).

    An edge row (the first row after one of ``edges``, a request made when a scope opened)
    belongs to the scope that asked for it even when that scope closed before the sampler
    took the row, as aitune's reading taken inside the scope's start does. The first
    ``carried`` rows of ``frame`` (already returned by an earlier call) only lend their GPU
    readings to the rows after them.
    """
    import pandas

    t = np.asarray(frame.column("mono_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(t, kind="stable")
    frame, t = frame.take(pa.array(order, type=pa.int64())), t[order]
    end = intervals.column("end_ns").fill_null(-1).to_numpy(zero_copy_only=False)
    begin = intervals.column("begin_ns").to_numpy(zero_copy_only=False)
    inner = innermost_scope(t, begin, end)
    served = _edge_rows(t, edges or [])
    inside = inner >= 0
    inside[list(served)] = True
    inside[:carried] = False
    # Only the intervals some row falls in become Python objects (a run has many scopes).
    used = np.unique(inner[inside & (inner >= 0)])
    few = intervals.take(pa.array(used, type=pa.int64()))
    names, module, backend = (
        few.column("name").to_pylist(),
        _label(few, "module"),
        _label(few, "backend"),
    )
    at = {int(j): k for k, j in enumerate(used.tolist())}
    context = [
        served.get(i) or (0, names[at[j]], module[at[j]], backend[at[j]])
        for i, j in enumerate(inner.tolist())
        if inside[i]
    ]
    gpus = sorted({int(m.group(1)) for c in frame.column_names if (m := _GPU_INDEX.fullmatch(c))})
    gpu = {
        f"cuda:{i}_{suffix}": _column(frame, f"gpu.{i}.{metric}", latest=True) * scale
        for i in gpus
        for suffix, metric, scale in _GPU
    }
    frame, t = frame.filter(pa.array(inside)), t[inside]
    data: dict[str, Any] = {
        "host_cpu_percent": _column(frame, "cpu.util_pct"),
        "host_memory_used": _ints(_column(frame, "mem.used_bytes")),
        "host_memory_free": _ints(_column(frame, "mem.available_bytes")),
    }
    data["torch_allocated"], data["torch_reserved"] = _torch_at(t, torch_readings or [])
    data.update({name: _ints(values[inside]) for name, values in gpu.items()})
    data["scope"] = [c[1] for c in context]
    data["module_name"] = [c[2] for c in context]
    data["backend"] = [c[3] for c in context]
    data["timestamp"] = (t - start_ns) / 1e9
    rows: pandas.DataFrame = pandas.DataFrame(data)
    return rows


def empty_rows() -> pandas.DataFrame:
    """aitune's DataFrame of no rows (its receiver builds it from an empty list: no columns)."""
    import pandas

    empty: pandas.DataFrame = pandas.DataFrame()
    return empty
