"""A report's inputs named by bytes that are not UTF-8 (a Linux file name is bytes; Python holds
such a byte as a lone surrogate): a folder of recordings, a partitioned dataset and a segment
folder are read (pyarrow takes UTF-8 paths only, so such files are read through their
descriptors), and an error about such a file names it."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main

T0_NS = 1_800_000_000_000_000_000


def _table(n: int, offset: float = 0.0) -> pa.Table:
    return pa.table(
        {
            "time": pa.array([T0_NS + i * 10_000_000 for i in range(n)], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([i * 10_000_000 for i in range(n)], pa.int64()),
            "cpu.util_pct": pa.array([offset + i for i in range(n)], pa.float64()),
        }
    )


def _write(table: pa.Table, path: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        pq.write_table(table, f)


def test_a_folder_of_recordings_with_a_name_that_is_not_utf8_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = os.fsencode(tmp_path / "plain")
    _write(_table(40), root + b"/run-\xff.parquet")
    assert main(["report", os.fsdecode(root)]) == 0
    out = capsys.readouterr().out
    assert "40 rows over 0.390 s" in out and "19.50" in out  # the mean of 0..39


def test_a_dataset_whose_partition_is_not_utf8_keeps_every_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = os.fsencode(tmp_path / "ds")
    _write(_table(30), root + b"/host=a/rank=0/part-0.parquet")
    _write(_table(20, 100.0), root + b"/host=b\xff/rank=1/part-0.parquet")
    assert main(["report", os.fsdecode(root)]) == 0
    out = capsys.readouterr().out
    assert "host=a rank=0" in out and "host=b\\xff rank=1" in out, out
    assert "30 rows over 0.290 s" in out and "20 rows over 0.190 s" in out
    assert "109.50" in out  # rank 1's mean: its own rows, not rank 0's


def test_an_unreadable_file_that_is_not_utf8_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = os.fsencode(tmp_path / "bad")
    _write(_table(10), root + b"/good.parquet")
    os.makedirs(root, exist_ok=True)
    with open(root + b"/broken-\xfe.parquet", "wb") as f:
        f.write(b"PAR1 not a Parquet file")
    assert main(["report", os.fsdecode(root)]) == 2
    err = capsys.readouterr().err
    assert "broken-\\udcfe.parquet" in err and "not a readable Parquet file" in err, err
    assert "codec" not in err


@pytest.mark.parametrize(
    ("order", "said"),
    [
        ([2, 1, 0, 3, 4, 5], "of its 6 rows, 2 times mono_ns goes back (the rows are sorted)"),
        ([0, 1, 1, 2, 2, 2], "of its 6 rows, 3 row(s) repeat the mono_ns of the row before (kept)"),
        (
            [5, 4, 4, 3],
            "of its 4 rows, 2 times mono_ns goes back (the rows are sorted); 1 row(s) repeat "
            "the mono_ns of the row before (kept)",
        ),
    ],
)
def test_reversed_or_repeated_rows_are_said_naming_the_file_and_the_counts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    order: list[int],
    said: str,
) -> None:
    table = _table(6).take(pa.array(order))
    path = tmp_path / "odd.parquet"
    pq.write_table(table, path)
    assert main(["report", str(path)]) == 0
    assert f"{len(order)} rows over" in capsys.readouterr().out
    (record,) = [r for r in caplog.records if r.name == "stroboscope.report"]
    assert record.getMessage() == f"{path}: {said}: not as a recorder writes them"


def test_rows_in_order_are_read_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "fine.parquet"
    pq.write_table(_table(6), path)
    assert main(["report", str(path)]) == 0
    assert not [r for r in caplog.records if r.name == "stroboscope.report"]
