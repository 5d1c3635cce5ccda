"""Metric series out of a sample frame, and vectorised range statistics over them.

A *series* is the valid cells of one metric column as two sorted arrays: the time each value was
read (``int64`` ns on CLOCK_MONOTONIC) and the value (``float64``). A GPU cell is timed by when
its GPU was read (:func:`read_times`: ``gpu.{i}.read_mono_ns``, else the poll's
``gpu.read_mono_ns``, which can be milliseconds before the row copied it), every other cell by
the row's ``mono_ns``.

Range queries take half-open intervals ``[begin, end)`` and never loop in Python over samples or
intervals: prefix sums for sums and counts, one flat expansion plus ``reduceat`` for maxima, and
a piecewise-linear model (``np.interp`` and a cumulative trapezoid) for values and integrals at
times between readings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

ANCHOR_KEY = b"stroboscope.anchor_realtime_ns"
GPU_READ = "gpu.read_mono_ns"
AMD_READ = "amd_gpu.read_mono_ns"


@dataclass(frozen=True)
class Series:
    """Valid readings of one metric: ``t`` (ns, CLOCK_MONOTONIC, sorted) and ``v``."""

    name: str
    t: I64
    v: F64

    def __len__(self) -> int:
        return len(self.t)


def check_samples(samples: Any) -> pa.Table:
    """``samples`` as a pyarrow Table with an int64 ``mono_ns`` column (TypeError, ValueError)."""
    if not isinstance(samples, pa.Table):
        to_arrow = getattr(samples, "to_arrow", None)
        if to_arrow is None:
            raise TypeError(
                f"samples must be a pyarrow.Table in the sample-frame schema (or a Frame), "
                f"got {type(samples).__name__}"
            )
        samples = to_arrow()
    if "mono_ns" not in samples.column_names:
        raise ValueError("samples has no 'mono_ns' column: pass a sample frame (Frame.to_arrow())")
    return samples


def mono(samples: pa.Table) -> I64:
    """The ``mono_ns`` column as int64 (ns, CLOCK_MONOTONIC)."""
    col = samples.column("mono_ns")
    if col.null_count:
        raise ValueError("samples has null cells in 'mono_ns'")
    return np.asarray(col.cast(pa.int64()).to_numpy(), dtype=np.int64)


def anchor_of(samples: pa.Table | None, intervals: pa.Table | None, given: int | None) -> int:
    """Realtime ns minus monotonic ns: ``given``, else the intervals' metadata, else the median
    of the frame's ``time - mono_ns``; ValueError when none of them is known."""
    if given is not None:
        return int(given)
    meta = intervals.schema.metadata if intervals is not None else None
    if meta and ANCHOR_KEY in meta:
        return int(meta[ANCHOR_KEY])
    if samples is not None and samples.num_rows and "time" in samples.column_names:
        time = samples.column("time").cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
        ok = pc.and_(time.is_valid(), samples.column("mono_ns").is_valid())
        t = np.asarray(time.filter(ok).to_numpy(), dtype=np.int64)
        m = np.asarray(samples.column("mono_ns").filter(ok).to_numpy(), dtype=np.int64)
        if len(t):
            return int(np.median(t - m))
    raise ValueError(
        "the realtime anchor is unknown: pass anchor_realtime_ns, or samples with a 'time' column"
    )


def cpu_column(samples: pa.Table) -> str | None:
    """The CPU column that figures per region read: ``proc.cpu_pct`` when it has values, else
    ``cpu.util_pct`` when present (None when the frame has neither)."""
    present = [c for c in ("proc.cpu_pct", "cpu.util_pct") if c in samples.column_names]
    with_values = [c for c in present if samples.column(c).null_count < samples.num_rows]
    chosen = with_values or present
    return chosen[0] if chosen else None


def is_read_time(name: str) -> bool:
    """Whether column ``name`` says when something was read (a poll's or one GPU's
    ``...read_mono_ns``): a clock reading, not a metric."""
    return name.endswith(".read_mono_ns")


def read_times(samples: pa.Table, column: str, rows: I64) -> I64:
    """Per row: when ``column``'s cell was read, ``rows`` (the rows' ``mono_ns``) where nothing
    better is known. A ``gpu.{i}.*`` cell is timed by its GPU's own read time
    (``gpu.{i}.read_mono_ns``: a poll reads the GPUs one after another) where the row has it,
    else by its poll's start: ``gpu.read_mono_ns``, or ``amd_gpu.read_mono_ns`` on a frame with
    AMD GPUs only."""
    if not column.startswith("gpu."):
        return rows
    names = set(samples.column_names)
    parts = column.split(".")
    order = [AMD_READ] if AMD_READ in names and GPU_READ not in names else []
    order += [GPU_READ] if GPU_READ in names else []
    if len(parts) == 3 and parts[1].isdigit() and f"gpu.{parts[1]}.read_mono_ns" in names:
        order.append(f"gpu.{parts[1]}.read_mono_ns")
    t = rows
    for name in order:  # the most specific last: it wins where the row has it
        read = int64_cells(samples.column(name), -1)
        t = np.where(read >= 0, read, t)
    return np.asarray(t, dtype=np.int64)


def _times(samples: pa.Table, column: str) -> I64:
    """Per row: the time its ``column`` cell was read (see :func:`read_times`)."""
    return read_times(samples, column, mono(samples))


def series(samples: pa.Table, column: str) -> Series:
    """The valid cells of ``column`` (see the module docstring for their times)."""
    t = _times(samples, column)
    col = samples.column(column)
    if col.null_count:  # its readings only: no filled copy of every row
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        t, col = t[valid], col.drop_null()
    v = np.asarray(col.cast(pa.float64()).to_numpy(), dtype=np.float64)
    return _sorted(column, t, v)


def total_series(samples: pa.Table, columns: list[str], name: str) -> Series:
    """Row-wise sum of ``columns`` on the rows where every one of them is valid."""
    t = _times(samples, columns[0])
    valid = np.ones(samples.num_rows, dtype=bool)
    total = np.zeros(samples.num_rows, dtype=np.float64)
    for c in columns:
        col = samples.column(c)
        valid &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        total += np.asarray(col.cast(pa.float64()).fill_null(0.0).to_numpy(), dtype=np.float64)
    return _sorted(name, t[valid], total[valid])


def _sorted(name: str, t: I64, v: F64) -> Series:
    if len(t) > 1 and bool((np.diff(t) < 0).any()):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    return Series(name, t, v)


def gpu_labels(names: Iterable[str]) -> list[int]:
    """The labels ``i`` of the GPUs that have a column (``gpu.{i}.…``) in ``names``, sorted."""
    found = set()
    for n in names:
        parts = n.split(".", 2)
        if len(parts) == 3 and parts[0] == "gpu" and parts[1].isdigit():
            found.add(int(parts[1]))
    return sorted(found)


def gpu_columns(names: list[str], metric: str) -> dict[int, str]:
    """``{i: "gpu.{i}.{metric}"}`` for the GPUs whose column is in ``names``."""
    out: dict[int, str] = {}
    for n in names:
        parts = n.split(".")
        if len(parts) == 3 and parts[0] == "gpu" and parts[1].isdigit() and parts[2] == metric:
            out[int(parts[1])] = n
    return dict(sorted(out.items()))


def ranges(t: I64, begin: I64, end: I64) -> tuple[I64, I64]:
    """Index ranges ``[lo, hi)`` of the readings with ``begin <= t < end`` (a call owns its
    start, not its end, as in :func:`samples_by_scope`)."""
    lo = np.searchsorted(t, begin, side="left").astype(np.int64)
    hi = np.searchsorted(t, end, side="left").astype(np.int64)
    return lo, np.maximum(hi, lo)


def range_sum(v: F64, lo: I64, hi: I64) -> F64:
    """Sum of ``v[lo:hi]`` per range."""
    cs = np.concatenate(([0.0], np.cumsum(v)))
    return np.asarray(cs[hi] - cs[lo], dtype=np.float64)


def expand(lo: I64, hi: I64) -> tuple[I64, I64]:
    """The indices ``lo[j] .. hi[j]-1`` of every range, flat, and where each range starts in
    that flat array (ranges may overlap: each is expanded on its own)."""
    n = hi - lo
    starts = np.concatenate(([0], np.cumsum(n)[:-1])).astype(np.int64) if len(n) else n
    total = int(n.sum()) if len(n) else 0
    flat = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, n)
    return flat, starts


RANGE_BATCH = 1 << 20
"""Readings :func:`range_max` expands at once: nested scopes over a 1-hour 1 kHz run cover
about 13M readings, 200 MiB of indices and values expanded whole."""


def range_max(v: F64, lo: I64, hi: I64) -> F64:
    """Maximum of ``v[lo:hi]`` per range (NaN for an empty range): ranges of up to
    :data:`RANGE_BATCH` readings in all expanded at once, a longer range read in place."""
    out = np.full(len(lo), np.nan)
    idx = np.flatnonzero(hi > lo)
    if not len(idx):
        return out
    sizes = hi[idx] - lo[idx]
    for i in idx[sizes > RANGE_BATCH]:  # one range over the batch: its own view, no copy
        out[i] = v[lo[i] : hi[i]].max()
    idx, sizes = idx[sizes <= RANGE_BATCH], sizes[sizes <= RANGE_BATCH]
    batch = (np.cumsum(sizes) - sizes) // RANGE_BATCH  # each batch under twice RANGE_BATCH
    bounds = [0, *(np.flatnonzero(np.diff(batch)) + 1).tolist(), len(idx)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        part = idx[a:b]
        flat, starts = expand(lo[part], hi[part])
        out[part] = np.maximum.reduceat(v[flat], starts)
    return out


def sorted_unique(a: I64) -> I64:
    """The distinct values of ``a``, sorted (a sort and a neighbour test: much faster than
    ``np.unique``'s hashing on millions of int64)."""
    a = np.sort(a)
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def interp(s: Series, x: I64) -> F64:
    """The series' value at times ``x``, linear between readings; NaN outside its span."""
    if len(s) == 0:
        return np.full(len(x), np.nan)
    out = np.interp(x.astype(np.float64), s.t.astype(np.float64), s.v)
    return np.where((x < s.t[0]) | (x > s.t[-1]), np.nan, out)


def integral(s: Series, x: I64) -> F64:
    """The integral of the series (value * ns) from its first reading to ``x``, with the value
    linear between readings (a trapezoid per gap); NaN outside the series' span."""
    if len(s) == 0:
        return np.full(len(x), np.nan)
    dt = np.diff(s.t).astype(np.float64)
    cum = np.concatenate(([0.0], np.cumsum(dt * (s.v[1:] + s.v[:-1]) / 2.0)))
    k = np.clip(np.searchsorted(s.t, x, side="right") - 1, 0, len(s) - 1)
    at = interp(s, x)
    part = (x - s.t[k]).astype(np.float64) * (s.v[k] + at) / 2.0
    return np.asarray(cum[k] + part, dtype=np.float64)


def cells(column: pa.ChunkedArray, dtype: type[np.generic], missing: float) -> npt.NDArray[Any]:
    """A numeric column's cells as ``dtype`` (int64 or float64), ``missing`` where null. Read
    from the Arrow buffers: pyarrow's own null handling (``fill_null`` with a Python scalar,
    ``to_numpy`` over nulls) imports pandas, half a second inside the first window."""
    arr = column.cast(pa.int64() if dtype is np.int64 else pa.float64()).combine_chunks()
    n, off = len(arr), arr.offset
    validity, data = arr.buffers()[:2]
    if n == 0 or data is None:
        return np.full(n, missing, dtype=dtype)
    values = np.frombuffer(data, dtype=dtype, count=off + n)[off:]
    if arr.null_count and validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        values = np.where(bits[off : off + n].astype(bool), values, missing)
    return np.asarray(values, dtype=dtype)


def int64_cells(column: pa.ChunkedArray, missing: int) -> I64:
    """An integer column's cells as int64, ``missing`` where null (see :func:`cells`)."""
    return np.asarray(cells(column, np.int64, missing), dtype=np.int64)
