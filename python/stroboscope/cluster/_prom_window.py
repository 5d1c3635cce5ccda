"""Summaries of one window of rows: a gauge's mean and maximum, a counter's latest total, a
bitmask's OR. Every value is in the metric's base unit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stroboscope.cluster._cells import column_stats, valid_cells
from stroboscope.cluster._prom_names import PromSeries


@dataclass(frozen=True)
class Summary:
    """One column over one window: ``value`` (mean, latest total or OR) and ``max`` (gauges;
    None otherwise), in base units; ``count`` is the number of non-null cells it used."""

    value: float
    max: float | None
    count: int


def summarise_column(column: pa.ChunkedArray | pa.Array, series: PromSeries) -> Summary | None:
    """Summary of the valid cells of ``column``; None when it has none."""
    if series.kind == "bitmask":
        cells = valid_cells(column)
        if len(cells) == 0:
            return None
        values = np.asarray(cells.to_numpy(zero_copy_only=False), dtype=np.int64)
        return Summary(float(np.bitwise_or.reduce(values)), None, len(cells))
    stats = column_stats(column)
    if stats is None:
        return None
    if series.kind == "counter":
        return Summary(series.scaled(stats.last), None, stats.count)
    return Summary(series.scaled(stats.mean), series.scaled(stats.maximum), stats.count)


def summarise(table: pa.Table, series: Sequence[PromSeries]) -> dict[str, Summary]:
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
