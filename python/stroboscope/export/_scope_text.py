"""The per-scope table of a report, as text: the full summary where pandas is installed, else
calls and durations (shared by the terminal text and the HTML page)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import fmt_seconds, text_table

SCOPE_HEADER = ("scope", "calls", "open", "total", "mean", "min", "max")


def scope_text(samples: pa.Table, intervals: pa.Table) -> str:
    """The per-scope summary as text: :func:`stroboscope.analysis.scope_summary.summary`
    (durations, and CPU, memory, GPU, power and energy inside each scope), which needs pandas;
    without pandas, the calls and durations of :func:`scope_counts`."""
    try:
        import pandas  # noqa: F401

        from stroboscope.analysis.scope_summary import format_summary, summary
    except ImportError:
        return text_table(SCOPE_HEADER, scope_counts(intervals))
    return format_summary(summary(samples, intervals))


def scope_counts(intervals: pa.Table) -> list[tuple[str, ...]]:
    """Per scope name: calls, calls still open, and the total, mean, min and max duration of
    the closed ones (the scope table when pandas is not installed)."""
    rows = []
    names = intervals.column("name").to_pylist()
    begin = intervals.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    end_col = intervals.column("end_ns")
    closed = end_col.is_valid().to_numpy(zero_copy_only=False)
    end = pc.fill_null(end_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    for name in dict.fromkeys(names):
        mask = pc.equal(intervals.column("name"), name).to_numpy(zero_copy_only=False)
        done = (end - begin)[mask & closed] / 1e9
        stats = (done.sum(), done.mean(), done.min(), done.max()) if len(done) else (None,) * 4
        durations = [fmt_seconds(None if v is None else float(v)) for v in stats]
        rows.append((str(name), str(int(mask.sum())), str(int((mask & ~closed).sum())), *durations))
    return rows
