"""What ``stroboscope report`` reads: a spool (with its segments), a folder of segments, a
hive-partitioned dataset of several hosts/ranks (one series each), several files at once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fake_proc import PID, FakeProc
from stroboscope import Sampler
from stroboscope._base.text import fmt_value
from stroboscope.cli import main
from stroboscope.export.report import build_report
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.stacks import write_stacks
from stroboscope.formats.writers import companions, scopes_path
from stroboscope.recording.spool import recover


def _recorded(tmp_path: Path, rows: int, sent_per_row: int) -> pa.Table:
    fake = FakeProc(tmp_path / f"proc{sent_per_row}")
    s = Sampler(
        0.001, pid=PID, sources=["memory", "network"], rate_window=0, proc_root=str(fake.root)
    )
    for _ in range(rows):
        s.tick_now(1)
        fake.advance(sent=sent_per_row)
    table = s.snapshot().to_arrow()
    s.close()
    return table


def test_spool_and_segment_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spool = tmp_path / "spool" / "run.spool"
    spool.parent.mkdir()
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    s.tick_now(30)
    assert s._segments is not None
    s._segments.flush()  # one segment now (as the writer's thread would)
    s.tick_now(20)
    want = recover(spool).to_arrow()
    assert want.num_rows == 50
    from_spool = build_report([str(spool)]).series
    assert [x.table.num_rows for x in from_spool] == [50]
    assert from_spool[0].table.column("mono_ns").equals(want.column("mono_ns"))
    # The folder: the spool with its segments, then the segments alone (the spool lost).
    from_dir = build_report([str(spool.parent)]).series
    assert [x.label for x in from_dir] == ["run.spool"] and from_dir[0].table.num_rows == 50
    segments = segment_paths(spool)
    assert segments, "the writer flushed a segment"
    only = tmp_path / "segments"
    only.mkdir()
    for seg in segments:
        shutil.copy(seg, only / seg.name)
    seg_rows = sum(pq.read_metadata(seg).num_rows for seg in segments)
    got = build_report([str(only)]).series
    assert [x.label for x in got] == ["run.spool"]
    assert (
        got[0].table.column("mono_ns").to_pylist() == want.column("mono_ns").to_pylist()[:seg_rows]
    )
    assert main(["report", str(only)]) == 0
    assert f"{seg_rows} rows over" in capsys.readouterr().out
    s.close()


def test_partitioned_dataset_gives_one_series_per_host_and_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "dataset"
    tables = {}
    for host, rank, sent in (("a", 0, 100), ("a", 1, 200), ("b", 2, 300)):
        d = root / "job=7" / f"host={host}" / f"rank={rank}"
        d.mkdir(parents=True)
        table = _recorded(tmp_path, 12, sent)
        pq.write_table(table.slice(0, 6), d / "part-0.parquet")
        pq.write_table(table.slice(6), d / "part-1.parquet")
        pq.write_table(pa.table({"name": ["x"]}), d / "part-0.scopes.parquet")  # not a part
        tables[(host, rank)] = table
    series = build_report([str(root)]).series
    assert [s.label for s in series] == [
        "job=7 host=a rank=0",
        "job=7 host=a rank=1",
        "job=7 host=b rank=2",
    ]
    for s, table in zip(series, tables.values()):
        assert s.table.column_names == table.column_names  # partition keys are not metrics
        assert (
            s.table.column("net.sent_bytes").to_pylist()
            == table.column("net.sent_bytes").to_pylist()
        )
        assert s.table.schema.field("net.sent_bytes").metadata[b"kind"] == b"counter"
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "--static"]) == 0
    out = capsys.readouterr().out
    for label, sent in (("job=7 host=a rank=0", 100), ("job=7 host=b rank=2", 300)):
        block = out.split(f"== {label}")[1].split("== ")[0]
        row = next(line for line in block.splitlines() if line.startswith("net.sent_bytes "))
        assert re.split(r"\s{2,}", row)[4] == fmt_value(sent * 11, "bytes")  # 11 steps of sent
    assert (tmp_path / "r.html").read_text().count("[job=7 host=") == 0  # labels are in the PNGs
    assert "<h2>job=7 host=b rank=2</h2>" in (tmp_path / "r.html").read_text()


def test_files_kept_beside_a_recording_are_not_read_as_recordings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder (a dataset partition, or a plain folder) holding a recording with its scope
    intervals and stacks beside it (the names ``companions()`` gives) reads as that recording:
    the companions are not rows of it."""
    mono = [1_000, 2_000]
    samples = pa.table(
        {
            "mono_ns": mono,
            "pid": [1, 1],
            "tid": [1, 1],
            "stack_id": [0, 0],
            "cpu_ns": [5, 5],
            "thread": ["main", "main"],
        }
    )
    frames = pa.table(
        {"stack_id": [0], "depth": [0], "function": ["f"], "file": ["f.py"], "line": [1]}
    )
    table = _recorded(tmp_path, 6, 10)
    for folder in (tmp_path / "dataset" / "job=7" / "host=a" / "rank=0", tmp_path / "plain"):
        folder.mkdir(parents=True)
        run = folder / "part-0.parquet"
        pq.write_table(table, run)
        write_stacks(samples, frames, run)
        pq.write_table(pa.table({"name": ["x"]}), scopes_path(run))
        assert sorted(companions(run).values())[:4] == sorted(
            str(p) for p in folder.iterdir()
        )  # every file there is the recording or one of its companions
        given = folder.parents[2] if "job=7" in str(folder) else folder
        caplog.clear()
        got = build_report([str(given)]).series
        assert caplog.records == []  # no rows "left out": none of the companions was read
        assert len(got) == 1
        assert got[0].table.column_names == table.column_names
        assert got[0].table.column("mono_ns").to_pylist() == table.column("mono_ns").to_pylist()


def test_several_files_are_several_series(tmp_path: Path) -> None:
    for name, sent in (("one", 10), ("two", 20)):
        pq.write_table(_recorded(tmp_path, 5, sent), tmp_path / f"{name}.parquet")
    series = build_report([str(tmp_path / "one.parquet"), str(tmp_path / "two.parquet")]).series
    assert [s.label for s in series] == ["one", "two"]
    totals = [s.table.column("net.sent_bytes").to_pylist()[-1] for s in series]
    assert totals == [40, 80]


def test_a_recording_read_one_column_at_a_time_is_the_file_read_whole(tmp_path: Path) -> None:
    from stroboscope.export._recording import read_columns as _read_columns

    meta = {"unit": "%", "kind": "rate"}
    table = pa.table(
        {
            "time": pa.array([1, 2, 3], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([1, 2, 3], pa.int64()),
            "cpu.util_pct": pa.array([None, 5.0, None], pa.float64()),
        }
    )
    schema = table.schema.set(2, table.schema.field(2).with_metadata(meta))
    table = table.cast(schema).replace_schema_metadata({"stroboscope.rows_lost": "0"})
    path = tmp_path / "run.parquet"
    pq.write_table(table, path, row_group_size=2)  # two row groups
    pf = pq.ParquetFile(path)
    got = _read_columns(pf, None)
    assert got.equals(pf.read()) and got.schema.equals(pf.read().schema, check_metadata=True)
    assert got.schema.field("cpu.util_pct").metadata == {b"unit": b"%", b"kind": b"rate"}
    part = _read_columns(pf, ["time", "cpu.util_pct"])
    assert part.equals(pf.read(columns=["time", "cpu.util_pct"]))
