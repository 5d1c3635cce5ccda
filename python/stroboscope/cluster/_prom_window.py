"""Summaries of one window of rows: a gauge's mean and maximum, a counter's latest total, a
bitmask's OR. Every value is in the metric's base unit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.cluster._prom_names import Series


@dataclass(frozen=True)
class Summary:
    """One column over one window: ``value`` (mean, latest total or OR) and ``max`` (gauges;
    None otherwise), in base units; ``count`` is the number of non-null cells it used."""

    value: float
    max: float | None
    count: int


def summarise_column(column: pa.ChunkedArray | pa.Array, series: Series) -> Summary | None:
    """Summary of the non-null cells of ``column``; None when it has none (or only NaN)."""
    cells = column.drop_null()
    if pa.types.is_floating(cells.type):
        cells = cells.filter(pc.invert(pc.is_nan(cells)))
    n = len(cells)
    if n == 0:
        return None
    if series.kind == "counter":
        return Summary(series.scaled(float(cells[n - 1].as_py())), None, n)
    if series.kind == "bitmask":
        values = np.asarray(cells.to_numpy(zero_copy_only=False), dtype=np.int64)
        return Summary(float(np.bitwise_or.reduce(values)), None, n)
    mean = pc.mean(cells).as_py()
    top = pc.max(cells).as_py()
    if mean is None or top is None or not math.isfinite(mean):
        return None
    return Summary(series.scaled(float(mean)), series.scaled(float(top)), n)


def summarise(table: pa.Table, series: Sequence[Series]) -> dict[str, Summary]:
    """``{column: Summary}`` for every series whose column has a value in ``table``."""
    out: dict[str, Summary] = {}
    names = set(table.column_names)
    for s in series:
        if s.column not in names:
            continue
        summary = summarise_column(table.column(s.column), s)
        if summary is not None:
            out[s.column] = summary
    return out
