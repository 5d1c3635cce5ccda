"""summary() with edge counters: ``cpu_ms_edges`` from the calls' own CPU clocks, and which
figures come from the edges and which from the rows."""

from __future__ import annotations

import pyarrow as pa
from _scope_tables import Call, frame, intervals
from stroboscope.analysis.scopes import summary

MS = 1_000_000


def _with_counters(table: pa.Table, cpu_ns: list[int | None]) -> pa.Table:
    out = table.append_column("cpu_ns", pa.array(cpu_ns, pa.int64()))
    for name in ("minflt", "majflt", "nvcsw", "nivcsw"):
        out = out.append_column(name, pa.array([None] * len(cpu_ns), pa.int64()))
    return out


def test_cpu_ms_edges_is_the_mean_of_the_calls_own_cpu_time() -> None:
    calls: list[Call] = [
        ("a", "a", 1, 1, 0, 0, 1 * MS, {}),
        ("a", "a", 1, 1, 0, 2 * MS, 3 * MS, {}),
        ("a", "a", 1, 1, 0, 4 * MS, 5 * MS, {}),  # no counters on its edges
        ("b", "b", 1, 1, 0, 6 * MS, 7 * MS, {}),
    ]
    iv = _with_counters(intervals(calls), [200_000, 400_000, None, 900_000])
    samples = frame([0, 5 * MS], {"proc.cpu_pct": [50.0, 50.0]})
    df = summary(samples, iv)
    assert df.loc["a", "cpu_ms_edges"] == 0.3
    assert df.loc["a", "cpu_ms_edges_n"] == 2
    assert df.loc["b", "cpu_ms_edges"] == 0.9
    assert "minflt_edges" not in df.columns  # mode "cpu": no rusage counts
    assert "cpu_ms_edges" in df.attrs["from_edges"] and "total_s" in df.attrs["from_edges"]
    assert "cpu_pct_mean" in df.attrs["from_rows"]
    assert not set(df.attrs["from_edges"]) & set(df.attrs["from_rows"])
    assert set(df.attrs["from_edges"]) | set(df.attrs["from_rows"]) == set(df.columns)


def test_without_edge_counters_there_is_no_edge_column() -> None:
    iv = intervals([("a", "a", 1, 1, 0, 0, 1 * MS, {})])
    df = summary(frame([0], {"proc.cpu_pct": [5.0]}), iv)
    assert "cpu_ms_edges" not in df.columns
    assert "cpu_ms_edges" not in df.attrs["from_edges"]
