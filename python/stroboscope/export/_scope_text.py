"""The per-scope tables as text, in one home: :func:`format_summary` (the full summary of
:func:`~stroboscope.analysis.scope_summary.summary`) and, without pandas, the calls and
durations of :func:`scope_counts`; both write durations and bytes with the package's one set of
human units (:func:`~stroboscope._base.text.fmt_seconds`, ``fmt_value``). Shared by the
terminal text and the HTML page."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stroboscope._base.text import fmt_seconds, fmt_value, printable, text_table
from stroboscope.analysis.scope_durations import name_durations
from stroboscope.analysis.scope_summary import summary_columns
from stroboscope.export._recording import Recording

if TYPE_CHECKING:
    import pandas

__all__ = [
    "SCOPE_HEADER",
    "format_summary",
    "recording_scope_table",
    "scope_counts",
    "scope_samples",
    "scope_table",
    "scope_text",
    "summary_table",
]

SCOPE_HEADER = ("scope", "calls", "open", "total", "mean", "min", "max")


ScopeTable = tuple[tuple[str, ...], list[tuple[str, ...]], int]
"""A per-scope table: header, rows (cells as text) and how many leading columns are labels."""


def scope_table(samples: pa.Table, intervals: pa.Table) -> ScopeTable:
    """The per-scope summary as a table, the one the terminal prints as text and the page as
    an HTML table: :func:`stroboscope.analysis.scope_summary.summary` (durations, and CPU,
    memory, GPU, power and energy inside each scope), which needs pandas; without pandas, the
    calls and durations of :func:`scope_counts`."""
    try:
        import pandas  # noqa: F401

        from stroboscope.analysis.scope_summary import summary
    except ImportError:
        return SCOPE_HEADER, scope_counts(intervals), 1
    return summary_table(summary(samples, intervals))


def scope_samples(s: Recording) -> pa.Table:
    """The rows of ``s`` that the per-scope summary reads: ``time``, ``mono_ns`` and the
    columns of :func:`~stroboscope.analysis.scope_summary.summary_columns`, not the whole
    recording."""
    return s.columns(summary_columns(s.column_names))


def recording_scope_table(s: Recording) -> ScopeTable | None:
    """:func:`scope_table` of a recording's scopes and rows (:func:`scope_samples`); None
    when it has no scope call."""
    if s.scopes is None or not s.scopes.num_rows:
        return None
    return scope_table(scope_samples(s), s.scopes)


def scope_text(samples: pa.Table, intervals: pa.Table) -> str:
    """:func:`scope_table` as aligned text (labels left, figures right)."""
    header, rows, labels = scope_table(samples, intervals)
    return text_table(header, rows, left=labels)


def scope_counts(intervals: pa.Table) -> list[tuple[str, ...]]:
    """Per scope name: calls (closed ones, as :func:`~stroboscope.analysis.scope_summary.summary`
    counts them), calls still open, and the total, mean, min and max duration of the closed
    ones (the scope table when pandas is not installed; the figures of
    :func:`~stroboscope.analysis.scope_durations.name_durations`, the durations' one home)."""
    names, d = name_durations(intervals)
    rows = []
    for i, name in enumerate(names):
        closed, still_open = int(d["calls"][i]), int(d["open"][i])
        figures = (fmt_seconds(float(d[k][i]) if closed else None) for k in _COUNTS)
        rows.append((printable(name), str(closed), str(still_open), *figures))
    return rows


_COUNTS = ("total_s", "mean_s", "min_s", "max_s")


# (header, value columns shown "a / b", count column, kind of value)
_FIGURES: tuple[tuple[str, tuple[str, ...], str | None, str], ...] = (
    ("calls", ("calls",), None, "int"),
    ("total", ("total_s",), None, "s"),
    ("mean", ("mean_s",), None, "s"),
    ("p50", ("p50_s",), None, "s"),
    ("p99", ("p99_s",), None, "s"),
    ("max", ("max_s",), None, "s"),
    ("excl", ("exclusive_s",), None, "s"),
    ("cpu/call (edges)", ("cpu_ms_edges",), "cpu_ms_edges_n", "ms"),
    ("cpu % mean/max", ("cpu_pct_mean", "cpu_pct_max"), "cpu_pct_n", "num"),
    ("rss max/growth", ("rss_bytes_max", "rss_bytes_growth"), "rss_bytes_n", "bytes"),
    ("gpu % mean/max", ("gpu_util_pct_mean", "gpu_util_pct_max"), "gpu_util_pct_n", "num"),
    ("gpu mem max", ("gpu_mem_bytes_max",), "gpu_mem_bytes_n", "bytes"),
    ("power W mean/max", ("power_w_mean", "power_w_max"), "power_w_n", "num"),
    ("energy J", ("energy_j",), "energy_j_n", "num"),
)


def _value(v: Any, kind: str) -> str:
    """One figure of the table: seconds and bytes in the package's human units
    (:func:`~stroboscope._base.text.fmt_seconds`, ``fmt_value``), counts as integers,
    other numbers in 4 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    x = float(v)
    if kind == "int":
        return str(int(x))
    if kind == "s":
        return fmt_seconds(x)
    if kind == "ms":
        return fmt_seconds(x / 1e3)
    if kind == "bytes":
        return fmt_value(x, "bytes")
    return f"{x:.4g}"


def summary_table(df: pandas.DataFrame) -> ScopeTable:
    """``summary()``'s DataFrame as a table: one row per scope and labels, the durations, then
    each metric figure with its reading count in brackets (``[n]``). Figures the frame did not
    have are left out; a missing label is ``-``; control characters in a name or label are
    escaped (:func:`~stroboscope._base.text.printable`), in the page as in the
    terminal."""
    header = [printable(n) for n in df.index.names]
    shown = [f for f in _FIGURES if all(c in df.columns for c in f[1])]
    header += [f[0] for f in shown]
    rows: list[tuple[str, ...]] = []
    for key, row in zip(df.index, df.itertuples(index=False)):
        values = dict(zip(df.columns, row))
        keys = key if isinstance(key, tuple) else (key,)
        cells = [
            "-" if k is None or (isinstance(k, float) and math.isnan(k)) else printable(k)
            for k in keys
        ]
        for _, columns, count, kind in shown:
            text = " / ".join(_value(values[c], kind) for c in columns)
            if count is not None and count in values:
                text += f" [{int(values[count])}]"
            cells.append(text)
        rows.append(tuple(cells))
    return tuple(header), rows, len(df.index.names)


def format_summary(df: pandas.DataFrame) -> str:
    """``summary()``'s DataFrame as an aligned text table (:func:`summary_table`); control
    characters in a name or label are escaped
    (:func:`~stroboscope._base.text.printable`), so each row stays one line."""
    header, rows, labels = summary_table(df)
    return text_table(header, rows, left=labels)
