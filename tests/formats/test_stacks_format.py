"""The stored stacks (formats/stacks.py): two Parquet files beside a recording, 0600, read back
equal by pyarrow (through read_stacks) and by DuckDB, and a hostile or damaged file refused in
words that name it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats.provenance import PROVENANCE_KEY
from stroboscope.formats.stacks import (
    FRAMES_SCHEMA,
    SAMPLES_SCHEMA,
    NoStacksError,
    check_stacks,
    has_stacks,
    read_stacks,
    remove_stacks,
    stack_frames_path,
    stacks_path,
    write_stacks,
)
from stroboscope.formats.writers import companions


def samples() -> pa.Table:
    return pa.table(
        {
            "mono_ns": [100, 200, 200, 300],
            "pid": [7, 7, 7, 7],
            "tid": [70, 70, 71, 70],
            "stack_id": [0, 1, 1, 0],
            "cpu_ns": [None, 90, None, 40],
            "thread": ["MainThread", "MainThread", None, "MainThread"],
        }
    )


def frames() -> pa.Table:
    return pa.table(
        {
            "stack_id": [0, 1, 1],
            "depth": [0, 0, 1],
            "function": ["main", "main", "Model.step"],
            "file": ["train.py", "train.py", "model.py"],
            "line": [1, 1, 40],
        }
    )


def test_paths_sit_beside_the_recording_and_are_its_companions() -> None:
    assert stacks_path("d/run.parquet") == "d/run.stacks.parquet"
    assert stack_frames_path("d/run.PQ") == "d/run.stack_frames.parquet"
    assert stacks_path("run.csv") == "run.stacks.parquet"
    assert stacks_path("run.data") == "run.data.stacks.parquet"
    files = companions("d/run.parquet")
    assert files["the stack samples of"] == "d/run.stacks.parquet"
    assert files["the interned stacks of"] == "d/run.stack_frames.parquet"


def test_written_private_with_provenance_and_read_back_by_pyarrow_and_duckdb(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run.parquet"
    out = write_stacks(samples(), frames(), run, provenance={"pid": 7, "host": "h"})
    assert out == (str(tmp_path / "run.stacks.parquet"), str(tmp_path / "run.stack_frames.parquet"))
    for path in out:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not run.exists()  # the recording is not touched
    got_samples, got_frames = read_stacks(run)
    assert got_samples.schema.remove_metadata() == SAMPLES_SCHEMA
    assert got_frames.schema == FRAMES_SCHEMA
    assert got_samples.to_pylist() == samples().to_pylist()
    assert got_frames.to_pylist() == frames().to_pylist()
    prov = json.loads(got_samples.schema.metadata[PROVENANCE_KEY.encode()])
    assert prov == {"pid": 7, "host": "h", "rows": 4}
    frames_meta = pq.read_schema(out[1]).metadata[PROVENANCE_KEY.encode()]
    assert json.loads(frames_meta)["rows"] == 3
    # DuckDB joins the two files as they are (an independent Parquet reader)
    rows = duckdb.execute(
        f"SELECT s.mono_ns, s.tid, s.cpu_ns, f.function FROM '{out[0]}' s "
        f"JOIN '{out[1]}' f ON s.stack_id = f.stack_id AND f.depth = 1 ORDER BY s.mono_ns, s.tid"
    ).fetchall()
    assert rows == [(200, 70, 90, "Model.step"), (200, 71, None, "Model.step")]
    assert has_stacks(run)
    assert remove_stacks(run) == list(out)
    assert not has_stacks(run)


def test_integers_of_other_widths_are_cast_and_extra_columns_dropped(tmp_path: Path) -> None:
    wide = samples().append_column("extra", pa.array([1, 2, 3, 4]))
    wide = wide.set_column(1, "pid", wide.column("pid").cast(pa.int64()))
    got, _ = check_stacks(wide, frames().cast(pa.schema([(f.name, f.type) for f in FRAMES_SCHEMA])))
    assert got.schema == SAMPLES_SCHEMA
    assert got.column("pid").to_pylist() == [7, 7, 7, 7]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s, f: (s.drop_columns(["tid"]), f), "has no tid column"),
        (
            lambda s, f: (s.set_column(0, "mono_ns", pa.array(["a", "b", "c", "d"])), f),
            "column mono_ns must be int64, got string",
        ),
        (
            lambda s, f: (s.set_column(2, "tid", pa.array([1, 2, 2**40, 4])), f),
            "column tid does not fit int32",
        ),
        (
            lambda s, f: (s.set_column(3, "stack_id", pa.array([0, None, 1, 0])), f),
            "column stack_id has no value in row 1",
        ),
        (
            lambda s, f: (s.set_column(4, "cpu_ns", pa.array([None, -5, None, 1])), f),
            "row 1 has cpu_ns -5, below zero",
        ),
        (
            lambda s, f: (s.set_column(3, "stack_id", pa.array([0, 1, 9, 0])), f),
            "row 2 names stack_id 9, which",
        ),
        (
            lambda s, f: (s, f.set_column(1, "depth", pa.array([0, 0, 2]))),
            "stack 1 has depths that are not 0..n-1 each once (2 frames, depths 0 to 2)",
        ),
        (
            lambda s, f: (s, f.set_column(1, "depth", pa.array([0, 1, 1]))),
            "stack 1 has depths that are not 0..n-1",
        ),
        (
            lambda s, f: (s, f.set_column(1, "depth", pa.array([1, 0, 1]))),
            "stack 0 has depths that are not 0..n-1",
        ),
        (  # from 0 to n-1, but 1 missing and 0 twice
            lambda s, f: (
                s,
                pa.concat_tables([f.set_column(1, "depth", pa.array([0, 0, 2])), f.slice(1, 1)]),
            ),
            "stack 1 has depths that are not 0..n-1 each once (3 frames, depths 0 to 2)",
        ),
    ],
)
def test_a_hostile_file_is_refused_naming_it_and_the_row(
    tmp_path: Path, change: object, message: str
) -> None:
    bad_samples, bad_frames = change(samples(), frames())  # type: ignore[operator]
    run = tmp_path / "run.parquet"
    pq.write_table(bad_samples, stacks_path(run))  # written by someone else: not checked
    pq.write_table(bad_frames, stack_frames_path(run))
    with pytest.raises(ValueError, match=r"stack (samples|frames) .*") as info:
        read_stacks(run)
    assert message in str(info.value)
    assert str(tmp_path) in str(info.value)  # the file is named
    with pytest.raises(ValueError, match=r"stack|column|row"):
        write_stacks(bad_samples, bad_frames, tmp_path / "other.parquet")
    assert not os.path.exists(stacks_path(tmp_path / "other.parquet"))  # nothing written


def test_missing_or_garbled_files_are_named(tmp_path: Path) -> None:
    run = tmp_path / "run.parquet"
    with pytest.raises(ValueError, match=r"run.parquet: no such file"):
        read_stacks(run)
    run.write_bytes(b"PAR1 a recording")
    with pytest.raises(NoStacksError, match=r"recorded without --stacks"):
        read_stacks(run)
    Path(stacks_path(run)).write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"has stack samples but no frames: .*stack_frames"):
        read_stacks(run)
    pq.write_table(frames(), stack_frames_path(run))
    with pytest.raises(ValueError, match=r"stack samples .*run.stacks.parquet is not a readable"):
        read_stacks(run)
    with pytest.raises(ValueError, match=r"is a stacks file; give the recording"):
        read_stacks(stacks_path(run))
    os.unlink(stacks_path(run))
    os.mkfifo(stacks_path(run))  # a FIFO is refused, never waited on
    with pytest.raises(ValueError, match=r"is a FIFO, not a regular file"):
        read_stacks(run)


def test_a_samples_table_that_is_not_arrow_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"samples must be a pyarrow.Table, got dict"):
        check_stacks({"mono_ns": [1]}, frames())
