"""Frames through the Arrow PyCapsule interface: pyarrow, polars, DuckDB, Parquet, CSV."""

from __future__ import annotations

import csv
import os
import stat
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope import Frame, Sampler


@pytest.fixture(scope="module")
def frame() -> Frame:
    s = Sampler(0.001, sources={"memory": None, "cpu": 0.004}, capacity=1 << 12)
    with s:
        time.sleep(0.1)
    return s.snapshot()


def test_pyarrow_table_types_and_units(frame: Frame) -> None:
    table = pa.table(frame)
    assert table.num_rows == len(frame) > 20
    assert table.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    assert table.schema.field("mono_ns").type == pa.int64()
    assert table.schema.field("mem.util_pct").type == pa.float64()
    assert table.schema.field("mem.total_bytes").type == pa.int64()
    md = table.schema.field("mem.available_bytes").metadata
    assert md[b"unit"] == b"bytes" and md[b"kind"] == b"gauge"
    assert table.schema.field("cpu.util_pct").metadata[b"unit"] == b"%"
    # time is mono + one constant anchor, and close to the wall clock now.
    t = table.column("time").cast(pa.int64()).to_numpy()
    m = table.column("mono_ns").to_numpy()
    assert len(set((t - m).tolist())) == 1
    assert abs(int(t[-1]) - time.time_ns()) < 60e9
    assert np.all(np.diff(m) > 0)


def test_null_cells_where_source_not_due(frame: Frame) -> None:
    table = frame.to_arrow()
    mem = table.column("mem.util_pct")
    cpu = table.column("cpu.util_pct")
    assert mem.null_count == 0
    # cpu is read every 4th tick (and its first read has no previous reading: null).
    assert cpu.null_count >= (len(frame) * 3) // 4
    assert cpu.null_count < len(frame)


def test_capsules_zero_copy(frame: Frame) -> None:
    a = frame.to_arrow().column("mono_ns").chunks[0].buffers()[1].address
    b = pa.table(frame).column("mono_ns").chunks[0].buffers()[1].address
    assert a == b  # both point into the frame's own buffer: nothing was copied
    schema, array = frame.__arrow_c_array__()
    batch = pa.RecordBatch._import_from_c_capsule(schema, array)
    assert batch.num_rows == len(frame)
    assert pa.schema(frame).names == frame.column_names


def test_frame_outlives_sampler_and_arrow_outlives_frame() -> None:
    s = Sampler(0.001, sources=["memory"])
    with s:
        time.sleep(0.02)
    f = s.snapshot()
    del s
    table = pa.table(f)
    expect = table.column("mem.total_bytes").to_pylist()
    del f
    import gc

    gc.collect()
    assert table.column("mem.total_bytes").to_pylist() == expect


def test_polars_and_duckdb_read_the_frame(frame: Frame) -> None:
    import duckdb
    import polars as pl

    df = pl.DataFrame(frame)
    assert df.height == len(frame)
    assert df["mem.total_bytes"].to_list() == frame.to_arrow().column("mem.total_bytes").to_pylist()
    con = duckdb.connect()
    tbl = frame.to_arrow()
    con.register("tbl", tbl)
    row = con.execute('SELECT count(*), max("mem.total_bytes") FROM tbl').fetchone()
    assert row is not None
    n, total = row
    assert n == len(frame)
    assert total == tbl.column("mem.total_bytes")[0].as_py()


def test_to_pandas_and_numpy(frame: Frame) -> None:
    df = frame.to_pandas()
    assert len(df) == len(frame)
    assert str(df["time"].dt.tz) == "UTC"
    arrays = frame.to_numpy()
    assert arrays["mono_ns"].dtype == np.int64
    assert arrays["time"].dtype == np.dtype("datetime64[ns]")
    assert arrays["cpu.util_pct"].dtype == np.float64
    assert (
        np.isnan(arrays["cpu.util_pct"]).sum() == frame.to_arrow().column("cpu.util_pct").null_count
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_parquet_round_trip_is_private(frame: Frame, tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    frame.write_parquet(path)
    assert _mode(path) == 0o600
    back = pq.read_table(path)
    assert back.equals(frame.to_arrow())
    assert back.schema.field("mem.available_bytes").metadata[b"unit"] == b"bytes"


def test_csv_round_trip(frame: Frame, tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    frame.write_csv(path)
    assert _mode(path) == 0o600
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(frame)
    table = frame.to_arrow()
    assert [int(r["mono_ns"]) for r in rows] == table.column("mono_ns").to_pylist()
    cpu = table.column("cpu.util_pct").to_pylist()
    for r, v in zip(rows, cpu):
        if v is None:
            assert r["cpu.util_pct"] == ""
        else:
            assert float(r["cpu.util_pct"]) == pytest.approx(v)


def test_empty_frame_exports() -> None:
    s = Sampler(0.01, sources=["memory"])
    f = s.drain()
    assert len(f) == 0
    table = pa.table(f)
    assert table.num_rows == 0 and "mem.util_pct" in table.column_names
