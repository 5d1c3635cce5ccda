"""The one window reducer: the rows of one window, an Arrow table at a time, reduced per column.

The drop-in monitor and the senders (:class:`WindowAggregator`), the Prometheus exporter and the
OpenTelemetry exporter (:func:`window_stats`) all reduce a window here, by one rule: a column's
valid cells are those neither null nor NaN, and a window's statistics of a column are their
count, mean, maximum and last value; a column without valid cells, or whose mean is not finite,
has none.

Nothing here loops over samples in Python: each table is reduced column by column with
pyarrow.compute (count, sum, max, last valid value), and only those per-column partials are kept,
so a window of any length costs the same memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import IDENTIFIER, column_kind

Aggregate = Literal["last", "mean", "max"]
AGGREGATES: tuple[str, ...] = ("last", "mean", "max")

Column = Union[pa.ChunkedArray, pa.Array]


def valid_cells(column: Column) -> Column:
    """``column`` without its null cells and, for floats, its NaN ones."""
    cells = column.drop_null()
    if pa.types.is_floating(cells.type):
        cells = cells.filter(pc.invert(pc.is_nan(cells)))
    return cells


@dataclass(frozen=True)
class Stats:
    """The valid cells of one column in one window: count, mean, max and the last one."""

    count: int
    mean: float
    maximum: float
    last: float


@dataclass
class _Partial:
    """Count, sum, max and last valid cell of one column over the tables folded so far."""

    count: int = 0
    total: float = 0.0
    maximum: float = float("-inf")
    last: float | None = None
    integer: bool = False  # an int64 column: its last and max stay integers

    def fold(self, column: Column) -> None:
        """Add the valid cells of ``column`` (see :func:`valid_cells`)."""
        cells = valid_cells(column)
        n = len(cells)
        if n == 0:
            return
        self.integer = pa.types.is_integer(cells.type)
        values = cells.cast(pa.float64()) if cells.type != pa.float64() else cells
        self.count += n
        self.total += float(pc.sum(values).as_py())
        self.maximum = max(self.maximum, float(pc.max(values).as_py()))
        self.last = float(values[n - 1].as_py())

    def stats(self) -> Stats | None:
        """The window's :class:`Stats`; None without valid cells or with a mean not finite."""
        if self.count == 0 or self.last is None:
            return None
        mean = self.total / self.count
        if not math.isfinite(mean):
            return None
        return Stats(self.count, mean, self.maximum, self.last)


def window_column_stats(column: Column) -> Stats | None:
    """:class:`Stats` of ``column``'s valid cells; None when it has none (or a mean not finite)."""
    part = _Partial()
    part.fold(column)
    return part.stats()


def window_stats(table: pa.Table, names: Iterable[str]) -> dict[str, Stats]:
    """Per column of ``names`` found in ``table`` with statistics, its :class:`Stats`."""
    out: dict[str, Stats] = {}
    present = set(table.column_names)
    for name in names:
        if name in present and (stats := window_column_stats(table.column(name))) is not None:
            out[name] = stats
    return out


@dataclass(frozen=True)
class WindowInfo:
    """What a published window covered: its rows and the monotonic times of its first and last.

    ``first_mono_ns``/``last_mono_ns`` are on the clock of :func:`time.monotonic_ns` (the
    ``mono_ns`` column); both are None for a window without rows.
    """

    rows: int
    first_mono_ns: int | None
    last_mono_ns: int | None


class WindowAggregator:
    """Per-column count, sum, max and last valid value over the tables added since the reset.

    Parameters
    ----------
    columns : iterable of str
        The columns to aggregate (others in the tables are ignored; missing ones stay empty).
    counters : iterable of str
        Columns that are running totals (e.g. ``net.sent_bytes``): they always yield their last
        value, whatever the aggregate, because a mean or max of a total is not a total.
    levels : iterable of str
        Columns that are counts or integer levels (e.g. ``proc.threads``): they always yield
        their last value too, because a mean of a count (5.99 threads) is a value the process
        never had.

    Identifier columns (a thread id: unit ``id``, the rule of
    :func:`~stroboscope.analysis.column_stats.column_kind`) always yield their last value as well,
    found from the tables' schemas: a mean or max of ids names nothing.
    """

    def __init__(
        self, columns: Iterable[str], counters: Iterable[str] = (), levels: Iterable[str] = ()
    ) -> None:
        self.columns = list(dict.fromkeys(columns))
        self.counters = frozenset(counters)
        self.levels = frozenset(levels)
        self._last_only = self.counters | self.levels
        self._identifiers: set[str] = set()  # found in the tables added (see add)
        self.reset()

    def reset(self) -> None:
        """Start a new window."""
        self._parts = {c: _Partial() for c in self.columns}
        self.rows = 0
        self.first_mono_ns: int | None = None
        self.last_mono_ns: int | None = None

    def add(self, table: pa.Table) -> None:
        """Fold the rows of ``table`` (a drained frame as Arrow) into the window."""
        n = table.num_rows
        if n == 0:
            return
        self.rows += n
        if "mono_ns" in table.column_names:
            mono = table.column("mono_ns")
            if self.first_mono_ns is None:
                self.first_mono_ns = int(mono[0].as_py())
            self.last_mono_ns = int(mono[n - 1].as_py())
        names = set(table.column_names)
        for name, part in self._parts.items():
            if name not in names:
                continue
            column = table.column(name)
            if column_kind(table.schema.field(name), name) == IDENTIFIER:
                self._identifiers.add(name)
            part.fold(column)

    def result(self, how: Aggregate) -> dict[str, float | int]:
        """The window's value per column that had at least one valid cell.

        ``how`` is ``"last"`` (the latest valid value), ``"mean"`` (mean of the valid values) or
        ``"max"``; counter, level and identifier columns always give their last value (see
        :meth:`aggregate_of`). The last value and the max of an integer column are ints;
        everything else is a float.
        """
        if how not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {how!r}")
        out: dict[str, float | int] = {}
        for name, part in self._parts.items():
            stats = part.stats()
            if stats is None:
                continue
            applies = self.aggregate_of(name, how)
            if applies == "mean":
                out[name] = stats.mean
                continue
            value = stats.last if applies == "last" else stats.maximum
            out[name] = int(value) if part.integer else value
        return out

    def aggregate_of(self, column: str, how: Aggregate) -> Aggregate:
        """The aggregate that applies to ``column`` when ``how`` is asked: ``"last"`` for
        counter and level columns and for the identifiers among the tables added, else
        ``how``."""
        return "last" if column in self._last_only or column in self._identifiers else how

    def info(self) -> WindowInfo:
        """The rows and time span of the window so far."""
        return WindowInfo(self.rows, self.first_mono_ns, self.last_mono_ns)


def column_bits(column: Column) -> tuple[int, int] | None:
    """The bitwise OR of ``column``'s valid cells (a bitmask over a window) and their count;
    None when it has none."""
    cells = valid_cells(column)
    if len(cells) == 0:
        return None
    values = np.asarray(cells.to_numpy(zero_copy_only=False), dtype=np.int64)
    return int(np.bitwise_or.reduce(values)), len(cells)
