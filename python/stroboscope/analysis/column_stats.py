"""Column statistics of a recording and their plain-text table, the one home of them (``record``
prints them at the end, ``report`` prints them per input and puts them in the HTML). Not the
per-scope summary (:mod:`stroboscope.analysis.scope_summary`).

Per metric column: unit, kind, samples and how often they came, then for levels and rates
(``gauge``/``rate``) the mean, min, max and last value, and for counters (running totals since
the sampler's first reading) the total over the rows and its mean rate per second — never the
mean of a running total. Identifiers (a thread id: unit ``id``) are never aggregated as numbers:
they get their distinct values, the most frequent one and the last. Durations come from the
data (first to last row's ``mono_ns``), not from the wall clock of the command, so writing the
file is not counted.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.text import printable

TIME_COLUMNS = ("time", "mono_ns")
"""Columns every recording has that are not metrics."""

KINDS = ("gauge", "rate", "counter")
IDENTIFIER = "identifier"
"""The kind of a column whose values name something (a thread id), not a quantity."""
IDENTIFIER_UNIT = "id"
"""The unit the metric registry (docs/metrics.md) declares identifiers with: the one mark."""


@dataclass(frozen=True)
class ColumnStats:
    """One metric column's figures over the rows summarised.

    Attributes
    ----------
    name, unit, kind : str
        The column, its unit and kind (``gauge`` a level, ``rate`` a per-second rate or share
        computed from two readings, ``counter`` a running total since the first reading).
    rows : int
        Rows of the table.
    samples : int
        Rows in which the column holds a value.
    every_s : float or None
        Median time between two of its samples (seconds); None with fewer than two.
    mean, min, max, last : float or None
        Over its samples (None when it has none).
    total : float or None
        Counters only: last minus first sample (the increase over the rows).
    rate : float or None
        Counters only: ``total`` per second between its first and last sample.
    distinct, mode, mode_samples : int, float, int or None
        Identifiers only (``mean``, ``min`` and ``max`` None): how many distinct values, the
        most frequent one (the smallest among ties) and in how many samples it is.
    """

    name: str
    unit: str
    kind: str
    rows: int
    samples: int
    every_s: float | None
    mean: float | None
    min: float | None
    max: float | None
    last: float | None
    total: float | None = None
    rate: float | None = None
    distinct: int | None = None
    mode: float | None = None
    mode_samples: int | None = None


def column_kind(field: pa.Field, name: str | None = None) -> str:
    """The ``kind`` of a column: ``identifier`` for the unit ``id``, else from its field
    metadata; without it (a CSV read back) a name ending in ``.tid`` is an identifier, one in
    ``_per_s`` a rate and any other a gauge (no running total is assumed)."""
    md = field.metadata or {}
    if column_unit(field) == IDENTIFIER_UNIT or (not md and (name or field.name).endswith(".tid")):
        return IDENTIFIER
    kind = str(md.get(b"kind", b"").decode(errors="replace"))
    if kind in KINDS:
        return kind
    return "rate" if (name or field.name).endswith("_per_s") else "gauge"


def column_unit(field: pa.Field) -> str:
    """The unit of a column from its field metadata (``""`` when absent)."""
    return str((field.metadata or {}).get(b"unit", b"").decode(errors="replace"))


def _median_spacing_s(mono: np.ndarray) -> float | None:
    if len(mono) < 2:
        return None
    gaps = np.diff(mono)  # its own array: the median may reorder it (no second copy)
    return float(np.median(gaps, overwrite_input=True)) / 1e9


def column_stats(table: pa.Table, units: Mapping[str, str] | None = None) -> list[ColumnStats]:
    """The figures of every metric column of ``table`` (all but ``time`` and ``mono_ns``).

    ``units`` overrides the units of the field metadata (``record`` passes the sampler's).
    """
    out: list[ColumnStats] = []
    has_mono = "mono_ns" in table.column_names
    all_mono = table.column("mono_ns").to_numpy(zero_copy_only=False) if has_mono else None
    every_row: list[float | None] = []  # the spacing of all rows, computed once when needed
    for field in table.schema:
        name = field.name
        if name in TIME_COLUMNS or not (
            pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        ):
            continue
        unit = (units or {}).get(name) or column_unit(field)
        kind = column_kind(field)
        # One column at a time, its readings only: a column read every 10th row costs a tenth
        # of the table's rows here, not a filled copy of all of them.
        col = table.column(name)
        valid = None
        if col.null_count:
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
            col = col.drop_null()
        values = np.asarray(col.to_numpy(zero_copy_only=False), np.float64)
        del col
        nan = np.isnan(values)
        mono = all_mono
        if all_mono is not None and valid is None and not nan.any():
            if not every_row:
                every_row.append(_median_spacing_s(all_mono))
            every = every_row[0]
        else:
            if nan.any():
                values = values[~nan]
                if valid is None:
                    valid = ~nan
                else:
                    valid[np.flatnonzero(valid)[nan]] = False
            mono = None if all_mono is None or valid is None else all_mono[valid]
            every = None if mono is None else _median_spacing_s(mono)
        if len(values) == 0:
            out.append(
                ColumnStats(name, unit, kind, table.num_rows, 0, None, None, None, None, None)
            )
            continue
        if kind == IDENTIFIER:
            out.append(_identifier(name, unit, table.num_rows, values, every))
            continue
        total = rate = None
        if kind == "counter":
            total = float(values[-1] - values[0])
            if mono is not None and len(values) > 1:
                span = (int(mono[-1]) - int(mono[0])) / 1e9
                rate = total / span if span > 0 else None
        with np.errstate(over="ignore"):
            mean = float(np.mean(values))
        if np.isinf(mean) and np.isfinite(values).all():
            mean = float(np.sum(values / len(values)))  # the sum overflowed, the mean does not
        out.append(
            ColumnStats(
                name,
                unit,
                kind,
                table.num_rows,
                len(values),
                every,
                mean,
                float(np.min(values)),
                float(np.max(values)),
                float(values[-1]),
                total,
                rate,
            )
        )
    return out


def _identifier(
    name: str, unit: str, rows: int, values: np.ndarray, every: float | None
) -> ColumnStats:
    """An identifier column's figures: distinct values, the most frequent and the last."""
    distinct, counts = np.unique(values, return_counts=True)
    top = int(np.argmax(counts))  # the first of the largest counts: the smallest value
    return ColumnStats(
        name, unit, IDENTIFIER, rows, len(values), every, None, None, None, float(values[-1]),
        distinct=len(distinct), mode=float(distinct[top]), mode_samples=int(counts[top]),
    )  # fmt: skip


def data_span_s(table: pa.Table) -> float:
    """Seconds from the first to the last row (``mono_ns``); 0.0 with fewer than two rows."""
    if table.num_rows < 2 or "mono_ns" not in table.column_names:
        return 0.0
    mm = pc.min_max(table.column("mono_ns"))
    return (int(mm["max"].as_py()) - int(mm["min"].as_py())) / 1e9


def fmt_value(value: float | None, unit: str) -> str:
    """A value for a table: bytes in Ki/Mi/Gi, large and tiny numbers in 3 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in ((1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
            if magnitude >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f}"
    if magnitude >= 1e6 or (magnitude < 1e-2 and magnitude != 0):
        return f"{value:.3g}"
    return f"{value:.2f}"


def fmt_seconds(seconds: float | None) -> str:
    """``0.001`` → ``"1 ms"``, ``2.5`` → ``"2.5 s"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    if seconds >= 999.5:
        return f"{seconds:.0f} s"
    seconds = float(f"{seconds:.3g}")  # rounded first: 0.9999 ms is "1 ms", not "1e+03 µs"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def fmt_rate(value: float | None, unit: str) -> str:
    """A counter's rate: ``"1.50 Mi/s"`` for bytes, ``"3.00 mJ/s"`` for another unit."""
    text = fmt_value(value, unit)
    if text == "-":
        return text
    return f"{text}/s" if unit == "bytes" else f"{text} {unit}/s".replace(" /s", "/s")


LEVEL_HEADER = ("column", "unit", "kind", "samples", "every", "mean", "min", "max", "last")
IDENTIFIER_HEADER = ("column", "samples", "every", "distinct", "most frequent", "last")
COUNTER_HEADER = ("column", "unit", "samples", "every", "total", "rate (mean)", "first→last")


def level_rows(stats: list[ColumnStats]) -> list[tuple[str, ...]]:
    """Rows of the levels-and-rates table (gauges and rates that hold a value)."""
    return [
        (
            s.name,
            s.unit,
            s.kind,
            f"{s.samples}/{s.rows}",
            fmt_seconds(s.every_s),
            fmt_value(s.mean, s.unit),
            fmt_value(s.min, s.unit),
            fmt_value(s.max, s.unit),
            fmt_value(s.last, s.unit),
        )
        for s in stats
        if s.kind not in ("counter", IDENTIFIER) and s.samples
    ]


def _id_text(value: float | None) -> str:
    return "-" if value is None else str(int(value)) if float(value).is_integer() else str(value)


def identifier_rows(stats: list[ColumnStats]) -> list[tuple[str, ...]]:
    """Rows of the identifiers table (identifiers that hold a value): never a mean."""
    return [
        (
            s.name,
            f"{s.samples}/{s.rows}",
            fmt_seconds(s.every_s),
            str(s.distinct),
            f"{_id_text(s.mode)} ({s.mode_samples}/{s.samples})",
            _id_text(s.last),
        )
        for s in stats
        if s.kind == IDENTIFIER and s.samples
    ]


def _first(s: ColumnStats) -> float | None:
    return None if s.last is None or s.total is None else s.last - s.total


def counter_rows(stats: list[ColumnStats]) -> list[tuple[str, ...]]:
    """Rows of the counters table: total over the rows and mean rate (counters with a value)."""
    return [
        (
            s.name,
            s.unit,
            f"{s.samples}/{s.rows}",
            fmt_seconds(s.every_s),
            fmt_value(s.total, s.unit),
            fmt_rate(s.rate, s.unit),
            f"{fmt_value(_first(s), s.unit)} → {fmt_value(s.last, s.unit)}",
        )
        for s in stats
        if s.kind == "counter" and s.samples
    ]


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 1) -> str:
    """Columns padded to their widest cell; the first ``left`` columns left-aligned; control
    characters in a cell escaped (:func:`printable`), so each row stays one line."""
    header = tuple(printable(h) for h in header)
    rows = [tuple(printable(v) for v in r) for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        cells = [
            (v.ljust(w) if i < left else v.rjust(w)) for i, (v, w) in enumerate(zip(r, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


SAMPLES_NOTE = (
    "samples: rows holding a value, of all rows; every: median time between them. A source read "
    "every n-th tick fills every n-th row, a rate needs two readings (its first is empty), and a "
    "failed read leaves its cells empty."
)


def column_stats_text(
    table: pa.Table,
    units: Mapping[str, str] | None = None,
    *,
    stats: list[ColumnStats] | None = None,
) -> str:
    """The column statistics of ``table`` as plain text: its span from the data, one table for
    levels and rates (mean, min, max, last), one for counters (total and mean rate), one for
    identifiers (distinct, most frequent, last), what each sample count means, and the columns
    that hold no value at all.

    ``units`` overrides the units of the field metadata; ``stats`` are the figures of
    :func:`column_stats` when already computed.
    """
    if stats is None:
        stats = column_stats(table, units)
    span = data_span_s(table)
    spacing = None
    if "mono_ns" in table.column_names:
        spacing = _median_spacing_s(table.column("mono_ns").to_numpy(zero_copy_only=False))
    parts = [
        f"{table.num_rows} rows over {span:.3f} s of data (first to last row), "
        f"one every {fmt_seconds(spacing)} (median)"
    ]
    levels = level_rows(stats)
    if levels:
        parts += ["", text_table(LEVEL_HEADER, levels, left=3)]
    counters = counter_rows(stats)
    if counters:
        parts += ["", text_table(COUNTER_HEADER, counters, left=2)]
    identifiers = identifier_rows(stats)
    if identifiers:
        parts += ["", text_table(IDENTIFIER_HEADER, identifiers)]
    parts += ["", textwrap.fill(SAMPLES_NOTE, 100)]
    empty = [s.name for s in stats if s.samples == 0]
    if empty:
        parts.append(f"no value in any row: {', '.join(empty)}")
    return "\n".join(parts)
