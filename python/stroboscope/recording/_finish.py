"""The end of a spooled recording (``stroboscope record``): its rows written to the output and
summarised, one segment (or a few columns) in memory at a time, never the whole run.

:func:`write_output` streams the spool's parts (:func:`.spool.recover_parts`) into the output
file with the sampler's provenance, completed from the rows as
:func:`stroboscope.sampling._provenance.for_table` completes it for a whole table.
:func:`spool_column_stats` reads the metric columns a few at a time (each read alone from every
segment) for :func:`stroboscope.analysis.column_stats.column_stats_text`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from stroboscope.formats.provenance import PROVENANCE_KEY, dumps, from_schema
from stroboscope.formats.spool_read import recover_parts

SUMMARY_COLUMNS = 8
"""Metric columns read at once for the summary (memory: their cells of every row, not all)."""


def _first_nonempty(parts: Iterator[pa.Table]) -> tuple[pa.Table | None, Iterator[pa.Table]]:
    """The first part with a row (None when none has) and the parts from it on."""
    for part in parts:
        if part.num_rows:

            def again(first: pa.Table = part) -> Iterator[pa.Table]:
                yield first
                yield from parts

            return part, again()
    return None, iter(())


def _provenance(
    prov: Mapping[str, Any], recovered: Mapping[str, Any], first: pa.Table | None, rows: int
) -> dict[str, Any]:
    """``prov`` completed as ``for_table`` completes it for the whole table: the first row's
    time and clock anchor from ``first`` (its first row), the last row's time and the row
    count from the spool's own provenance (``recovered``: its last row is exact)."""
    from stroboscope.sampling._provenance import for_table

    out = for_table(prov, first.slice(0, 1) if first is not None else pa.table({}))
    out["rows"] = rows
    for key in ("end_ns", "end_time"):
        if recovered.get(key) is not None:
            out[key] = recovered[key]
    return out


def write_output(
    spool: str | os.PathLike[str], output: str | os.PathLike[str] | None, prov: Mapping[str, Any]
) -> tuple[int, int]:
    """Write every row of ``spool`` to ``output`` (Parquet or CSV by its suffix; nothing when
    None) with ``prov`` completed from the rows, one part in memory at a time; return the
    rows and columns."""
    from stroboscope.formats.writers import write_parts

    got = recover_parts(spool)
    if output is None:
        return got.rows, len(got.schema)
    first, parts = _first_nonempty(got.parts)
    full = _provenance(prov, from_schema(got.schema) or {}, first, got.rows)
    schema = got.schema.with_metadata(
        {**(got.schema.metadata or {}), PROVENANCE_KEY.encode(): dumps(full).encode()}
    )
    write_parts(schema, (part.replace_schema_metadata(schema.metadata) for part in parts), output)
    return got.rows, len(schema)


def spool_column_stats(
    spool: str | os.PathLike[str], units: Mapping[str, str]
) -> tuple[str, float]:
    """The text of :func:`stroboscope.analysis.column_stats.column_stats_text` for every row of
    ``spool``, read :data:`SUMMARY_COLUMNS` metric columns at a time, and the seconds from its
    first to its last row."""
    from stroboscope.analysis.column_stats import column_stats, column_stats_text, data_span_s

    clock = recover_parts(spool, columns=[])
    base = pa.Table.from_batches(
        [b for part in clock.parts for b in part.to_batches()], schema=clock.schema
    )
    names = [f.name for f in recover_parts(spool).schema if f.name not in base.column_names]
    figures = []
    for at in range(0, len(names), SUMMARY_COLUMNS):
        got = recover_parts(spool, columns=names[at : at + SUMMARY_COLUMNS])
        table = pa.Table.from_batches(
            [b for part in got.parts for b in part.to_batches()], schema=got.schema
        )
        figures += column_stats(table, units)
        del table
    return column_stats_text(base, units, stats=figures), data_span_s(base)
