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

import hashlib
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.text import fmt_rate, fmt_seconds, fmt_value, text_table

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


Parts = Callable[[Sequence[str] | None], Iterable[pa.Table]]
"""Every row of a recording in order, a part (a row group, a segment) at a time: called with
metric column names, the parts hold ``time``, ``mono_ns`` and those columns (every column for
None). Called once for the figures, then again for each narrowing of a median spacing."""

_BINS = 1 << 16
"""Bins of a pass that narrows a median spacing (each pass divides its range by this)."""
_COLLECT = 1 << 16
"""Spacings few enough to be kept and sorted in the last pass of a median."""


@dataclass(frozen=True)
class RowsFigures:
    """The rows of a table summarised: how many, the seconds from the first to the last row
    (``mono_ns``; 0.0 with fewer than two) and the median time between two rows (seconds;
    None with fewer than two)."""

    rows: int
    span_s: float
    every_s: float | None


def _numpy(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A numeric column's values as numpy (the cells of null rows are arbitrary) and which
    rows are not null (None: all), read from its buffers: ``to_numpy`` loads pandas (35-45
    MiB in ``record``'s process), pyarrow's pandas shim on its first conversion."""
    dtype = np.dtype(f"{'f' if pa.types.is_floating(col.type) else 'i'}{col.type.bit_width // 8}")
    if pa.types.is_unsigned_integer(col.type):
        dtype = np.dtype(f"u{dtype.itemsize}")
    values: list[np.ndarray] = []
    valid: list[np.ndarray] = []
    for chunk in col.chunks:
        n, at = len(chunk), chunk.offset
        bits, data = chunk.buffers()[:2]
        if data is None:
            values.append(np.zeros(n, dtype))
        else:
            values.append(np.frombuffer(data, dtype, count=n, offset=at * dtype.itemsize))
        if col.null_count:
            if chunk.null_count and bits is not None:
                raw = np.frombuffer(bits, np.uint8)
                valid.append(np.unpackbits(raw, count=at + n, bitorder="little")[at:].view(bool))
            else:
                valid.append(np.ones(n, bool))
    if not values:
        return np.empty(0, dtype), None
    whole = values[0] if len(values) == 1 else np.concatenate(values)
    return whole, None if not valid else valid[0] if len(valid) == 1 else np.concatenate(valid)


def _readings(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A column's readings as float64 (no null, no NaN) and which rows hold them (None: all)."""
    raw, valid = _numpy(col)
    if valid is not None:
        valid = valid.copy()  # changed below, where NaN
        raw = raw[valid]
    values = np.asarray(raw, np.float64)
    nan = np.isnan(values)
    if nan.any():
        values = values[~nan]
        if valid is None:
            valid = ~nan
        else:
            valid[np.flatnonzero(valid)[nan]] = False
    if valid is not None and valid.all():
        valid = None
    return values, valid


class _Spacing:
    """The spacings (``mono_ns`` differences) of one set of rows, fed a part at a time: their
    count and extremes, then the exact median by narrowing passes (a histogram of the range
    that holds the middle, until one value is left or few enough to sort)."""

    def __init__(self, column: str | None) -> None:
        self.column = column  # whose readings mark the rows (None: every row)
        self.prev: int | None = None
        self.n = 0
        self.lo = self.hi = 0
        self.ranks: list[list[Any]] = []  # [rank, lo, hi, below, inside, value, bins|kept]

    def gaps(self, mono: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        """The spacings that end in this part (the first from the last reading before it)."""
        at = mono if valid is None else mono[valid]
        if not len(at):
            return at
        if self.prev is None:
            gaps = np.diff(at)
        else:
            gaps = np.diff(at, prepend=np.asarray([self.prev], at.dtype))
        self.prev = int(at[-1])
        return gaps

    def count(self, gaps: np.ndarray) -> None:
        if len(gaps):
            lo, hi = int(gaps.min()), int(gaps.max())
            self.lo, self.hi = (lo, hi) if not self.n else (min(self.lo, lo), max(self.hi, hi))
            self.n += len(gaps)

    def start(self) -> None:
        """The ranks of the middle (one or two), each over the whole range."""
        self.prev = None
        if self.n:
            middle = [self.n // 2] if self.n % 2 else [self.n // 2 - 1, self.n // 2]
            self.ranks = [[r, self.lo, self.hi, 0, self.n, None, None] for r in middle]
            for rank in self.ranks:
                if self.lo == self.hi:
                    rank[5] = self.lo

    def open(self) -> bool:
        return any(r[5] is None for r in self.ranks)

    def feed(self, gaps: np.ndarray) -> None:
        """One part's spacings into each open rank's histogram or kept values."""
        for rank in self.ranks:
            _, lo, hi, _, inside, value, got = rank
            if value is not None:
                continue
            sel = gaps[(gaps >= lo) & (gaps <= hi)]
            if inside <= _COLLECT:
                rank[6] = (got or []) + [sel]
            else:
                width = -(-(hi - lo + 1) // _BINS)
                counts = np.bincount((sel - lo) // width, minlength=-(-(hi - lo + 1) // width))
                rank[6] = counts if got is None else got + counts

    def narrow(self) -> None:
        """After a pass: each open rank's value, or its range narrowed to one bin."""
        self.prev = None
        for rank in self.ranks:
            r, lo, hi, below, inside, value, got = rank
            if value is not None:
                continue
            if inside <= _COLLECT:
                kept = np.sort(np.concatenate(got)) if got else np.empty(0, np.int64)
                rank[5] = int(kept[r - below])
                continue
            width = -(-(hi - lo + 1) // _BINS)
            cum = np.cumsum(got)
            b = int(np.searchsorted(cum, r - below, side="right"))
            below += int(cum[b - 1]) if b else 0
            lo += b * width
            rank[1:7] = [lo, min(hi, lo + width - 1), below, int(got[b]), None, None]
            if rank[1] == rank[2]:
                rank[5] = lo

    def median_s(self) -> float | None:
        """The median spacing in seconds (None with no spacing), as ``np.median`` gives it."""
        if not self.ranks:
            return None
        middle = np.asarray([r[5] for r in self.ranks], np.int64)
        return float(np.mean(middle)) / 1e9


class _Figures:
    """One metric column's running figures over the parts."""

    def __init__(self, name: str, unit: str, kind: str) -> None:
        self.name, self.unit, self.kind = name, unit, kind
        self.samples = 0
        self.sums: list[float] = []  # one a part, added at the end
        self.scaled: list[float] = []  # the same of values / 2**64 (a sum that overflowed)
        self.finite = True
        self.min = self.max = self.first = self.last = 0.0
        self.first_mono: int | None = None
        self.last_mono: int | None = None
        self.ids: dict[float, int] = {}
        self.rows = hashlib.blake2b(digest_size=16)  # which rows hold a reading
        self.spacing: _Spacing | None = None

    def add(self, values: np.ndarray, valid: np.ndarray | None, mono: np.ndarray | None) -> None:
        n = len(values)
        mark = b"A" if valid is None else b"M" + np.packbits(valid).tobytes()
        self.rows.update(mark + str(len(values) if valid is None else len(valid)).encode())
        if not n:
            return
        if mono is not None:
            at = mono if valid is None else mono[valid]
            if self.first_mono is None:
                self.first_mono = int(at[0])
            self.last_mono = int(at[-1])
        if not self.samples:
            self.first, self.min, self.max = float(values[0]), np.inf, -np.inf
        self.samples += n
        self.last = float(values[-1])
        if self.kind == IDENTIFIER:
            distinct, counts = np.unique(values, return_counts=True)
            for v, c in zip(distinct.tolist(), counts.tolist()):
                self.ids[v] = self.ids.get(v, 0) + c
            return
        self.min = min(self.min, float(np.min(values)))
        self.max = max(self.max, float(np.max(values)))
        with np.errstate(over="ignore", invalid="ignore"):
            self.sums.append(float(np.sum(values)))
        self.finite = self.finite and bool(np.isfinite(values).all())
        if self.finite:
            self.scaled.append(float(np.sum(values / 2.0**64)))

    def stats(self, rows: int) -> ColumnStats:
        every = None if self.spacing is None else self.spacing.median_s()
        if not self.samples:
            return ColumnStats(
                self.name, self.unit, self.kind, rows, 0, None, None, None, None, None
            )
        if self.kind == IDENTIFIER:
            top = max(sorted(self.ids), key=lambda v: self.ids[v])  # the smallest of the most
            return ColumnStats(
                self.name, self.unit, IDENTIFIER, rows, self.samples, every, None, None, None,
                self.last, distinct=len(self.ids), mode=float(top), mode_samples=self.ids[top],
            )  # fmt: skip
        total = rate = None
        if self.kind == "counter":
            total = self.last - self.first
            if self.first_mono is not None and self.last_mono is not None and self.samples > 1:
                span = (self.last_mono - self.first_mono) / 1e9
                rate = total / span if span > 0 else None
        with np.errstate(over="ignore", invalid="ignore"):
            mean = float(np.sum(np.asarray(self.sums)) / self.samples)
            if np.isinf(mean) and self.finite:  # the sum overflowed, the mean does not
                mean = float(np.sum(np.asarray(self.scaled)) / self.samples * 2.0**64)
        return ColumnStats(
            self.name, self.unit, self.kind, rows, self.samples, every, mean, self.min, self.max,
            self.last, total, rate,
        )  # fmt: skip


def column_stats(table: pa.Table, units: Mapping[str, str] | None = None) -> list[ColumnStats]:
    """The figures of every metric column of ``table`` (all but ``time`` and ``mono_ns``).

    ``units`` overrides the units of the field metadata (``record`` passes the sampler's).
    """
    return column_stats_streamed(lambda _columns: (table,), units)[1]


def column_stats_streamed(
    parts: Parts, units: Mapping[str, str] | None = None
) -> tuple[RowsFigures, list[ColumnStats]]:
    """The figures of the rows and of every metric column of a table given a part at a time
    (:data:`Parts`), as :func:`column_stats` gives them for the whole table: the same counts,
    extremes, last values, totals, identifiers and median spacings; the mean is the parts'
    sums added, which can differ from the mean of the whole table in its last bits.

    Memory: a part's columns, and for each set of rows that hold readings (columns read at
    the same rows share one) at most two histograms of 2**16 bins or 2**16 spacings. Time:
    one pass over every column, then a pass over ``mono_ns`` and a column of each such set
    whose median spacing is not known yet (typically two or three; at most five).
    """
    figures: list[_Figures] = []
    every_row = _Spacing(None)
    all_rows = hashlib.blake2b(digest_size=16)  # what a column read in every row has
    rows, lo, hi, has_mono = 0, 0, 0, False
    for part in parts(None):
        if not figures and not rows:
            has_mono = "mono_ns" in part.column_names
            for field in part.schema:
                if field.name in TIME_COLUMNS or not (
                    pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
                ):
                    continue
                unit = (units or {}).get(field.name) or column_unit(field)
                figures.append(_Figures(field.name, unit, column_kind(field)))
        mono = None
        if has_mono and part.num_rows:
            mono = _numpy(part.column("mono_ns"))[0]
            every_row.count(every_row.gaps(mono, None))
            lo, hi = (int(mono.min()), int(mono.max())) if not rows else (
                min(lo, int(mono.min())), max(hi, int(mono.max())))  # fmt: skip
        rows += part.num_rows
        all_rows.update(b"A" + str(part.num_rows).encode())
        for f in figures:
            values, valid = _readings(part.column(f.name))
            f.add(values, valid, mono)
            if mono is not None:
                if f.spacing is None:
                    f.spacing = _Spacing(f.name)
                f.spacing.count(f.spacing.gaps(mono, valid))
        del part, mono
    # Columns read at the same rows have the same spacings: one median for them all.
    spacings: dict[bytes, _Spacing] = {}
    if has_mono and rows:
        spacings[all_rows.digest()] = every_row
    for f in figures:
        if f.spacing is not None:
            f.spacing = spacings.setdefault(f.rows.digest(), f.spacing)
    for s in spacings.values():
        s.start()
    while any(s.open() for s in spacings.values()):
        open_ = [s for s in spacings.values() if s.open()]
        for part in parts([s.column for s in open_ if s.column is not None]):
            mono = _numpy(part.column("mono_ns"))[0]
            for s in open_:
                valid = None if s.column is None else _readings(part.column(s.column))[1]
                s.feed(s.gaps(mono, valid))
            del part, mono
        for s in open_:
            s.narrow()
    span = (hi - lo) / 1e9 if rows > 1 and has_mono else 0.0
    return RowsFigures(rows, span, every_row.median_s()), [f.stats(rows) for f in figures]


def data_span_s(table: pa.Table) -> float:
    """Seconds from the first to the last row (``mono_ns``); 0.0 with fewer than two rows."""
    if table.num_rows < 2 or "mono_ns" not in table.column_names:
        return 0.0
    mm = pc.min_max(table.column("mono_ns"))
    return (int(mm["max"].as_py()) - int(mm["min"].as_py())) / 1e9


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
    spacing = None
    if "mono_ns" in table.column_names:
        spacing = _median_spacing_s(table.column("mono_ns").to_numpy(zero_copy_only=False))
    return stats_text(RowsFigures(table.num_rows, data_span_s(table), spacing), stats)


def stats_text(rows: RowsFigures, stats: list[ColumnStats]) -> str:
    """The text of :func:`column_stats_text` from figures already computed (of a table read a
    part at a time: :func:`column_stats_streamed`)."""
    parts = [
        f"{rows.rows} rows over {rows.span_s:.3f} s of data (first to last row), "
        f"one every {fmt_seconds(rows.every_s)} (median)"
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
