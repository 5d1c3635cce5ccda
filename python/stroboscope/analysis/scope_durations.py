"""The one home of a scope's per-call durations, numpy only (the tables made without pandas give
the same figures as :func:`stroboscope.analysis.scope_summary.summary`): per group of calls, the
closed calls, the open ones, and the closed calls' total, mean, min, max and quantiles."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stroboscope.analysis._series import F64, I64, int64_cells

__all__ = ["durations", "name_durations"]

_NS = 1e9


def durations(
    begin: I64, end: I64, closed: npt.NDArray[np.bool_], code: I64, count: int
) -> dict[str, npt.NDArray[Any]]:
    """The one home of the per-scope durations (numpy only, so the tables made without pandas
    give the same figures). Per group (``code``: each call's group, ``0 .. count - 1``):
    ``calls`` (closed), ``open``, and over the closed calls (``end - begin``, ns, as seconds)
    ``total_s`` (0 without a closed call), ``mean_s``, ``min_s``, ``max_s``, ``p50_s``,
    ``p99_s`` (linear between order statistics, numpy's default; NaN without a closed call)."""
    at = code[closed]
    dur_ns = end[closed] - begin[closed]
    calls = np.bincount(at, minlength=count)
    first = np.cumsum(calls) - calls
    some = calls > 0
    by_group = dur_ns[np.lexsort((dur_ns, at))]  # each group's durations, ascending, in turn
    total_ns = np.zeros(count, dtype=np.int64)  # summed in ns: exact, as the edges are
    if some.any():
        total_ns[some] = np.add.reduceat(by_group, first[some])
    total = total_ns / _NS
    ordered = by_group / _NS

    def quantile(q: float) -> F64:
        """Per group, the ``q`` quantile of its durations (numpy's linear method)."""
        pos = (calls - 1) * q
        lo = np.floor(pos).astype(np.int64)
        a = ordered[(first + lo)[some]]
        b = ordered[(first + np.minimum(lo + 1, calls - 1))[some]]
        t = (pos - lo)[some]
        out = np.full(count, np.nan)
        # numpy's lerp: from the nearer end (q = 0 and q = 1 give the order statistic itself)
        out[some] = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)
        return out

    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(some, total_ns / calls / _NS, np.nan)
    return {
        "calls": calls,
        "open": np.bincount(code[~closed], minlength=count),
        "total_s": total,
        "mean_s": mean,
        "min_s": quantile(0.0),
        "max_s": quantile(1.0),
        "p50_s": quantile(0.5),
        "p99_s": quantile(0.99),
    }


def name_durations(intervals: pa.Table) -> tuple[list[str], dict[str, npt.NDArray[Any]]]:
    """Per scope name, in the order of its first call: the names and the figures of
    :func:`durations` (every call of a name, wherever it was opened), without pandas. Reads
    the intervals' ``name``, ``begin_ns`` and ``end_ns`` only."""
    for column in ("name", "begin_ns", "end_ns"):
        if column not in intervals.column_names:
            raise ValueError(f"intervals lacks the column {column!r} (scope-intervals schema)")
    encoded = intervals.column("name").combine_chunks().dictionary_encode(null_encoding="encode")
    code = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    names = encoded.dictionary.to_pylist()
    begin_ns, end_ns = (intervals.column(c).cast(pa.int64()) for c in ("begin_ns", "end_ns"))
    closed = np.asarray(end_ns.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    begin, end = int64_cells(begin_ns, 0), int64_cells(end_ns, 0)
    return names, durations(begin, end, closed, code, len(names))
