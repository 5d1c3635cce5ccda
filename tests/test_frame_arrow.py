"""Frames through the Arrow PyCapsule interface: pyarrow, polars, DuckDB, Parquet, CSV."""

from __future__ import annotations

import csv
import ctypes
import gc
import os
import stat
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fake_proc import PID, FakeProc
from stroboscope import Frame, Sampler

ROWS = 64


@pytest.fixture(scope="module")
def frame(tmp_path_factory: pytest.TempPathFactory) -> Frame:
    # Deterministic ticks on a recorded /proc whose CPU counters advance by user 1, idle 3 after
    # every tick: cpu is due every 4th tick and reads 25 % busy. No sleeping, no luck.
    fake = FakeProc(tmp_path_factory.mktemp("frame") / "proc")
    s = Sampler(
        0.001,
        pid=PID,
        sources={"memory": None, "cpu": 0.004},
        capacity=1 << 12,
        cpu_window=0,
        proc_root=str(fake.root),
    )
    for _ in range(ROWS):
        s.tick_now(1)
        fake.advance(user=1, idle=3)
    return s.snapshot()


def test_pyarrow_table_types_and_units(frame: Frame) -> None:
    table = pa.table(frame)
    assert table.num_rows == len(frame) == ROWS
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
    # cpu is read on ticks 0, 4, 8, ...; its first read has no previous reading: null too.
    due = [i for i in range(ROWS) if i % 4 == 0 and i > 0]
    valid = cpu.is_valid().to_numpy(zero_copy_only=False)
    assert np.flatnonzero(valid).tolist() == due
    # 4 ticks of user +1, idle +3 between reads: 25 % busy.
    assert [cpu[i].as_py() for i in due] == [pytest.approx(25.0)] * len(due)


def test_capsules_zero_copy(frame: Frame) -> None:
    a = frame.to_arrow().column("mono_ns").chunks[0].buffers()[1].address
    b = pa.table(frame).column("mono_ns").chunks[0].buffers()[1].address
    assert a == b  # both point into the frame's own buffer: nothing was copied
    schema, array = frame.__arrow_c_array__()
    batch = pa.RecordBatch._import_from_c_capsule(schema, array)
    assert batch.num_rows == len(frame)
    assert pa.schema(frame).names == frame.column_names


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _malloc_in_use() -> int:
    """Bytes the C allocator has handed out and not had back (glibc's mallinfo2)."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("needs glibc >= 2.33 (mallinfo2) to see the C++ frame's memory")
    libc.mallinfo2.restype = _MallInfo2
    gc.collect()
    info = libc.mallinfo2()
    return int(info.uordblks) + int(info.hblkhd)


def test_arrow_buffers_keep_the_frame_alive() -> None:
    # Reading the values back after `del frame` would pass even if the buffers were freed (the
    # bytes are still there): instead, watch the allocator. The frame's buffers (50,000 rows
    # x 6 columns x 8 bytes, 2.4 MB) must stay allocated while an Arrow table uses them and
    # go back to the allocator when the last table goes.
    s = Sampler(0.001, sources=["memory"], capacity=1 << 16)
    s.tick_now(50_000)
    expected_bytes = 50_000 * 6 * 8
    before = _malloc_in_use()
    f = s.snapshot()
    assert _malloc_in_use() - before >= 0.95 * expected_bytes  # the allocator sees the frame
    s.close()
    del s
    gc.collect()  # the ring goes now, not at some later allocation between the readings below
    table = f.to_arrow()
    expect = table.column("mem.total_bytes").to_pylist()
    with_frame = _malloc_in_use()
    del f
    with_table = _malloc_in_use()
    assert with_frame - with_table < 0.05 * expected_bytes  # nothing freed: the table holds it
    assert table.column("mem.total_bytes").to_pylist() == expect
    del table
    assert with_table - _malloc_in_use() >= 0.95 * expected_bytes  # freed with the last user


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


def test_cpu_all_busy_reads_exactly_100(tmp_path: Path) -> None:
    # 11 busy ticks of 11: busy * (100 / total) gave 100.00000000000001; 100 * busy / total is
    # exact for whole tick counts.
    fake = FakeProc(tmp_path / "proc")
    s = Sampler(0.001, pid=PID, sources={"cpu": None}, cpu_window=0, proc_root=str(fake.root))
    try:
        for busy in (11, 22, 39):
            s.tick_now(1)
            fake.advance(user=busy)
        s.tick_now(1)
        util = s.snapshot().to_arrow().column("cpu.util_pct").drop_null().to_pylist()
    finally:
        s.close()
    assert util == [100.0, 100.0, 100.0]


def test_rows_before_the_first_are_skipped_by_an_arrow_offset(tmp_path: Path) -> None:
    # 100 rows into a 64-row ring: the snapshot starts at row 36, inside the ring's block of 64
    # rows. Its columns point at the block (an Arrow offset of 36, nothing moved); a column
    # without nulls carries no bitmap. The spool file, read by the Python reader from the
    # documented layout, is the reference for the values.
    fake = FakeProc(tmp_path / "proc")
    spool = tmp_path / "run.spool"
    s = Sampler(
        0.001,
        pid=PID,
        sources={"memory": None, "cpu": 0.004},
        capacity=64,
        cpu_window=0,
        proc_root=str(fake.root),
        spool=spool,
        segment_seconds=0.03,
    )
    for _ in range(100):
        s.tick_now(1)
        fake.advance(user=1, idle=3)
    from stroboscope.formats.spool_read import read_spool

    reference, first = read_spool(spool)
    frame = s.snapshot()
    table = frame.to_arrow()
    s.close()
    assert first == frame.first_row == 36 and table.num_rows == len(frame) == 64
    for name in table.column_names:
        (chunk,) = table.column(name).chunks
        assert chunk.offset == 36, name
        assert chunk.to_pylist() == reference.column(name).to_pylist(), name
    assert table.column("mem.total_bytes").chunks[0].buffers()[0] is None  # no nulls, no bitmap
    cpu = table.column("cpu.util_pct")
    assert cpu.null_count == 48 and cpu.chunks[0].buffers()[0] is not None  # read 1 row in 4
    assert cpu.drop_null().to_pylist() == [pytest.approx(25.0)] * 16
    import duckdb
    import polars as pl

    assert pl.DataFrame(frame)["cpu.util_pct"].to_list() == cpu.to_pylist()
    con = duckdb.connect()
    con.register("tbl", table)
    row = con.execute('SELECT count("cpu.util_pct"), min(mono_ns) FROM tbl').fetchone()
    assert row == (16, table.column("mono_ns")[0].as_py())


def _address(table: pa.Table) -> int:
    return int(table.column("mono_ns").chunks[0].buffers()[1].address)


def test_a_frame_buffer_is_reused_only_once_nothing_uses_it() -> None:
    s = Sampler(0.001, sources=["memory"], capacity=1 << 12)
    s.tick_now(1000)
    first = s.snapshot().to_arrow()
    kept = first.column("mono_ns").to_pylist()
    s.tick_now(10)
    second = s.snapshot().to_arrow()
    # The first table still uses its buffer: the second copy went elsewhere and left it as it was.
    assert _address(second) != _address(first)
    assert first.column("mono_ns").to_pylist() == kept
    address = _address(first)
    del first
    gc.collect()
    third = s.snapshot().to_arrow()
    assert _address(third) == address  # free again: reused, not a fresh allocation
    assert third.column("mono_ns").to_pylist() == second.column("mono_ns").to_pylist()
    s.close()
