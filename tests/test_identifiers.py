"""Identifier columns (thread ids: unit ``id`` in the metric registry) are never aggregated as
numbers: the column summary shows their distinct values, most frequent and last value (no mean,
min or max), the report's page shows them in a table, and no plot draws them as a line."""

from __future__ import annotations

import html
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from stroboscope.analysis.column_stats import IDENTIFIER, column_stats, column_stats_text
from stroboscope.export._groups import plot_groups
from stroboscope.export.report import build_report

TIDS = [4101, 4202, 4202, None, 4303, 4202, 4101]  # 4202 most frequent (3 of 6), last 4101


def table() -> pa.Table:
    meta = {
        "threads.top0.tid": {b"unit": b"id", b"kind": b"gauge"},
        "threads.top0.cpu_pct": {b"unit": b"%", b"kind": b"rate"},
    }
    schema = pa.schema(
        [pa.field("time", pa.timestamp("ns", tz="UTC")), pa.field("mono_ns", pa.int64())]
        + [
            pa.field(n, pa.int64() if n.endswith("tid") else pa.float64(), metadata=m)
            for n, m in meta.items()
        ]
    )
    n = len(TIDS)
    return pa.table(
        {
            "time": [1_790_000_000_000_000_000 + k * 10**6 for k in range(n)],
            "mono_ns": [k * 10**6 for k in range(n)],
            "threads.top0.tid": TIDS,
            "threads.top0.cpu_pct": [50.0] * n,
        },
        schema=schema,
    )


def row(text: str, name: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.startswith(name + " "))


def test_the_column_summary_never_averages_an_identifier() -> None:
    tid, cpu = column_stats(table())
    assert (tid.kind, tid.samples, tid.rows) == (IDENTIFIER, 6, 7)
    assert (tid.mean, tid.min, tid.max) == (None, None, None)
    assert (tid.distinct, tid.mode, tid.mode_samples, tid.last) == (3, 4202.0, 3, 4101.0)
    assert cpu.kind == "rate" and cpu.mean == 50.0
    text = column_stats_text(table())
    # The identifiers table: samples, every, distinct, most frequent (its share), last.
    assert row(text, "threads.top0.tid") == ["threads.top0.tid", "6/7", "1", "ms", "3", "4202",
                                             "(3/6)", "4101"]  # fmt: skip
    assert "3602" not in text  # the mean of the ids (21610 / 6), shown before
    assert text.index("most frequent") > text.index("threads.top0.cpu_pct")


def test_a_csv_read_back_keeps_identifiers_by_name(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    pacsv.write_csv(table().drop_columns(["time"]), path)
    back = pacsv.read_csv(path)  # no field metadata
    assert column_stats(back)[0].kind == IDENTIFIER


def test_identifiers_are_not_plotted_but_tabled_in_the_page(tmp_path: Path) -> None:
    schema = table().schema
    plotted = {c for g in plot_groups(schema) for _, cols in g.panels for c in cols}
    assert plotted == {"threads.top0.cpu_pct"}
    pytest.importorskip("matplotlib")
    path = tmp_path / "run.parquet"
    pq.write_table(table(), path)
    page = build_report([str(path)]).html()
    start = page.index("<h3>Identifiers</h3>")
    section = page[page.index("<tbody>", start) : page.index("</table>", start)]
    cells = [html.unescape(c.rsplit(">", 1)[1]) for c in section.split("</td>")[:-1]]
    assert cells == ["threads.top0.tid", "6/7", "1 ms", "3", "4202 (3/6)", "4101"]
    assert page.count("threads.top0.tid") == 1  # in that table only: no level row
