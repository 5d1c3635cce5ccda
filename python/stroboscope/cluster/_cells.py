"""The valid cells of one column in one window (neither null nor NaN) and their statistics:
what both exporters reduce a window's rows to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import pyarrow as pa
import pyarrow.compute as pc

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


def column_stats(column: Column) -> Stats | None:
    """:class:`Stats` of ``column``'s valid cells; None when it has none (or an infinite mean)."""
    cells = valid_cells(column)
    n = len(cells)
    if n == 0:
        return None
    mean, top = pc.mean(cells).as_py(), pc.max(cells).as_py()
    if mean is None or top is None or not math.isfinite(mean):
        return None
    return Stats(n, float(mean), float(top), float(cells[n - 1].as_py()))
