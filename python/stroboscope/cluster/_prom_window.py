"""Prometheus's values of one window: a gauge's mean and maximum, a counter's latest total, a
bitmask's OR, each in the metric's base unit. The window itself is reduced by
:mod:`stroboscope.analysis.windows`, the one reducer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from stroboscope.analysis.windows import column_bits, window_column_stats
from stroboscope.cluster._prom_names import PromSeries


@dataclass(frozen=True)
class Summary:
    """One column over one window: ``value`` (mean, latest total or OR) and ``max`` (gauges;
    None otherwise), in base units; ``count`` is the number of valid cells it used."""

    value: float
    max: float | None
    count: int


def summarise_column(column: pa.ChunkedArray | pa.Array, series: PromSeries) -> Summary | None:
    """Summary of the valid cells of ``column``; None when it has none."""
    if series.kind == "bitmask":
        bits = column_bits(column)
        return None if bits is None else Summary(float(bits[0]), None, bits[1])
    stats = window_column_stats(column)
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
