"""Runs side by side: one column per run, one row per figure (its span, then each column's
mean and max, or a counter's total), for the page and the terminal when a report has several
inputs. Identifiers are left out: they are names, not quantities to compare."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.text import fmt_seconds, fmt_value
from stroboscope.analysis.column_stats import (
    IDENTIFIER,
    ColumnStats,
    data_span_s,
)
from stroboscope.export._recording import Recording
from stroboscope.export._select import iso_ms

__all__ = ["compare_table"]

Describe = Callable[[Recording], list[ColumnStats]]


def compare_table(
    series: list[Recording], describe: Describe
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The header (``figure`` and each run's label) and rows of the side-by-side summary:
    rows, first row, span, then per metric column (in the order the runs first have them)
    ``mean / max`` of a level or rate and the total of a counter; ``-`` where a run lacks it.
    """
    header = ("figure", *(s.label for s in series))
    rows: list[tuple[str, ...]] = [
        ("source", *(s.source for s in series)),
        ("rows", *(str(s.num_rows) for s in series)),
        (
            "first row",
            *(iso_ms(int(pc.min(s.held.column("time").cast(pa.int64())).as_py())) for s in series),
        ),
        ("span", *(fmt_seconds(data_span_s(s.times)) for s in series)),
    ]
    figures: dict[str, dict[int, ColumnStats]] = {}
    for i, s in enumerate(series):
        for c in describe(s):
            if c.kind != IDENTIFIER and c.samples:
                figures.setdefault(c.name, {})[i] = c
    for name, by_run in figures.items():
        unit = next(iter(by_run.values())).unit
        if next(iter(by_run.values())).kind == "counter":
            label = f"{name} total" + (f" ({unit})" if unit else "")
            cells = [
                fmt_value(by_run[i].total, unit) if i in by_run else "-" for i in range(len(series))
            ]
        else:
            label = f"{name} mean / max" + (f" ({unit})" if unit else "")
            cells = [
                f"{fmt_value(by_run[i].mean, unit)} / {fmt_value(by_run[i].max, unit)}"
                if i in by_run
                else "-"
                for i in range(len(series))
            ]
        rows.append((label, *cells))
    return header, rows
