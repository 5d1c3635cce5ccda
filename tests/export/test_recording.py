"""A report of a Parquet recording never holds it decoded whole: ``time`` and ``mono_ns`` stay
in memory, every other column is read from the file by the consumer that needs it (the column
figures, the per-scope summary, the page, the plots), one at a time, and gives what the whole
table gave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.analysis.scope_summary import summary_columns
from stroboscope.export import report as report_mod
from stroboscope.export._inputs import check_recording
from stroboscope.export._page import page_data
from stroboscope.export._recording import Recording
from stroboscope.export.report import build_report

ROWS = 400
MS = 1_000_000
T0 = 1_790_000_000_000_000_000


def _field(name: str, typ: pa.DataType, unit: str, kind: str) -> pa.Field:
    return pa.field(name, typ, metadata={"unit": unit, "kind": kind})


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run of 400 rows 1 ms apart, written out of order with one row without a time:
    columns read every row, every 10th and every 100th, a counter, a thread id, a GPU; and a
    training loop's scopes beside it."""
    rng = np.random.default_rng(3)
    mono = 10**9 + np.arange(ROWS, dtype=np.int64) * MS
    every10 = np.arange(ROWS) % 10 == 0
    every100 = np.arange(ROWS) % 100 == 0
    cols: dict[str, tuple[pa.Field, pa.Array]] = {
        "cpu.util_pct": (
            _field("cpu.util_pct", pa.float64(), "%", "rate"),
            pa.array(rng.uniform(0, 100, ROWS), mask=~every10),
        ),
        "proc.cpu_pct": (
            _field("proc.cpu_pct", pa.float64(), "%", "rate"),
            pa.array(rng.uniform(0, 180, ROWS), mask=~every10),
        ),
        "proc.rss_bytes": (
            _field("proc.rss_bytes", pa.int64(), "bytes", "gauge"),
            pa.array(2**30 + np.cumsum(rng.integers(0, 4096, ROWS))),
        ),
        "mem.used_bytes": (
            _field("mem.used_bytes", pa.int64(), "bytes", "gauge"),
            pa.array(rng.integers(2**33, 2**34, ROWS), mask=~every100),
        ),
        "net.sent_bytes": (
            _field("net.sent_bytes", pa.int64(), "bytes", "counter"),
            pa.array(np.cumsum(rng.integers(0, 1000, ROWS))),
        ),
        "threads.top0.tid": (
            _field("threads.top0.tid", pa.int64(), "id", "gauge"),
            pa.array(4000 + rng.integers(0, 3, ROWS), mask=~every10),
        ),
        "gpu.0.util_pct": (
            _field("gpu.0.util_pct", pa.float64(), "%", "gauge"),
            pa.array(rng.uniform(0, 100, ROWS), mask=~every10),
        ),
    }
    fields = [pa.field("time", pa.timestamp("ns", "UTC")), pa.field("mono_ns", pa.int64())]
    time = pa.array(mono + T0, pa.timestamp("ns", "UTC"), mask=np.arange(ROWS) == 7)
    table = pa.Table.from_arrays(
        [time, pa.array(mono), *(a for _, a in cols.values())],
        schema=pa.schema(fields + [f for f, _ in cols.values()], metadata={"k": "v"}),
    )
    order = rng.permutation(ROWS)  # out of mono_ns order: the report sorts it
    path = tmp_path / "run.parquet"
    pq.write_table(table.take(pa.array(order)), path, row_group_size=64)
    steps = mono[20:380:60]
    scopes = pa.table(
        {
            "name": ["step"] * len(steps) + ["train"],
            "path": ["train/step"] * len(steps) + ["train"],
            "thread_id": pa.array([1] * (len(steps) + 1), pa.int64()),
            "stack_id": pa.array([1] * (len(steps) + 1), pa.uint64()),
            "depth": pa.array([1] * len(steps) + [0], pa.int32()),
            "begin_ns": pa.array([*steps.tolist(), int(mono[10])], pa.int64()),
            "end_ns": pa.array([*(steps + 40 * MS).tolist(), int(mono[390])], pa.int64()),
        }
    )
    pq.write_table(scopes, tmp_path / "run.scopes.parquet")
    return path


def _whole(run: Path) -> pa.Table:
    """The recording decoded whole, as the report read it before."""
    return check_recording(pq.read_table(run), str(run))


@pytest.mark.parametrize(
    "options",
    [{}, {"start": "0.05s", "end": "0.3s"}, {"scope": "step"}, {"columns": ["cpu.*,proc.*"]}],
)
def test_lazy_recording_is_the_table_read_whole(run: Path, options: dict[str, Any]) -> None:
    report = build_report([str(run)], **options)
    (s,) = report.series
    assert s.lazy is not None and s.held.column_names == ["time", "mono_ns"]
    whole = _whole(run)
    mono = whole.column("mono_ns").to_numpy()
    keep = np.isin(mono, s.held.column("mono_ns").to_numpy())
    want = whole.filter(pa.array(keep)).select(s.column_names)
    assert s.table.equals(want, check_metadata=True)
    # every figure the same as from the table in memory
    eager = report_mod.Report([s.with_table(want)], report.align)
    assert report.text() == eager.text()
    assert report.describe(s) == eager.describe(eager.series[0])
    got, want_blob = page_data(report.series), page_data(eager.series)
    assert got[0] == want_blob[0] and got[1] == want_blob[1]


def test_report_reads_one_column_at_a_time(
    run: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reads: list[list[str] | None] = []
    read = pq.ParquetFile.read

    def spy(self: pq.ParquetFile, columns: list[str] | None = None, **kw: Any) -> pa.Table:
        if "mono_ns" in self.schema_arrow.names:  # the recording, not its scopes
            reads.append(None if columns is None else list(columns))
        return read(self, columns=columns, **kw)

    asked: list[list[str]] = []
    columns = Recording.columns

    def spy_columns(self: Recording, names: list[str]) -> pa.Table:
        asked.append(list(names))
        return columns(self, names)

    def whole(self: Recording) -> pa.Table:
        raise AssertionError("a consumer of the report asked for the recording whole")

    monkeypatch.setattr(pq.ParquetFile, "read", spy)
    monkeypatch.setattr(Recording, "columns", spy_columns)
    monkeypatch.setattr(Recording, "table", property(whole))
    report = build_report([str(run)], start="0.01s")
    report.text()
    report_mod.write_html(report, tmp_path / "page.html")
    report_mod.write_html(report, tmp_path / "static.html", static=True)
    report_mod.write_pngs(report, tmp_path / "png")
    assert reads, "the recording was not read through pyarrow's ParquetFile"
    assert all(r is not None and len(r) == 1 for r in reads), reads  # one column a read
    (s,) = report.series
    assert s.held.column_names == ["time", "mono_ns"]  # nothing else kept in memory
    metrics = [n for n in s.column_names if n not in ("time", "mono_ns")]
    read_metrics = {r[0] for r in reads if r and r[0] in metrics}
    assert read_metrics == set(metrics)  # each column read for what shows it
    # several columns at once only for the per-scope summary, and only the ones it reads
    bound = set(summary_columns(s.column_names)) | {"time", "mono_ns"}
    assert all(len(names) == 1 or set(names) <= bound for names in asked), asked
    assert max(len(names) for names in asked) < len(metrics)


def test_file_changed_while_read_is_said(run: Path) -> None:
    report = build_report([str(run)])
    table = pq.read_table(run)
    pq.write_table(table.slice(0, 100), run)
    with pytest.raises(ValueError, match="changed while the report read it"):
        report.text()
