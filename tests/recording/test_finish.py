"""The clean end of a spooled recording (``recording.finish``, for ``record`` and the training
recorder): each row written once, and the same file, rows and provenance as the recovery path
(the spool and its segments read back, as ``stroboscope recover`` and a crash read them)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.compat._training import TrainingRecorder
from stroboscope.formats.pieces import pieces_path, read_index
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.spool_read import remove_spool
from stroboscope.recording import _finish, finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover


class RowsWritten:
    """Counts the rows handed to Parquet: every Parquet file the package writes, whole
    (``pq.write_table``) or a part at a time, goes through ``ParquetWriter.write_table``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        real = pq.ParquetWriter.write_table

        def write_table(writer: pq.ParquetWriter, table: pa.Table, *args: Any, **kw: Any) -> None:
            self.rows += table.num_rows
            real(writer, table, *args, **kw)

        monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)


def _rows(segments: list[Path]) -> int:
    return sum(pq.read_metadata(p).num_rows for p in segments)


def test_a_clean_record_writes_each_row_to_parquet_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run its ring holds writes no segment: every row goes to FILE once (it went to a
    segment at the stop, then was read back and written again)."""
    out = tmp_path / "run.parquet"
    written = RowsWritten(monkeypatch)
    args = ["record", "--interval", "0.001", "--duration", "0.5", "--quiet", "-o", str(out)]
    assert main(args) == 0
    rows = pq.read_metadata(out).num_rows
    assert rows > 0
    assert written.rows == rows
    assert not list(tmp_path.glob("run.parquet.spool*"))  # the spool and its files are gone


def _record(path: Path, segment_seconds: float, capacity: int, *, prepare: bool = True) -> Sampler:
    """A stopped spooled sampler whose end is :func:`finish`'s (prepared for it: its segments
    are pieces; ``prepare=False``: segment files), with ``segment_seconds`` segments (none when
    the ring holds the run)."""
    s = Sampler(
        0.001,
        sources=["cpu", "memory"],
        spool=path,
        segment_seconds=segment_seconds,
        capacity=capacity,
    )
    if prepare:
        _finish.prepare(s)
    with s:
        deadline = time.monotonic() + 60
        while s.stats().rows_written < 1200:
            assert time.monotonic() < deadline, "the sampler wrote too few rows"
            time.sleep(0.05)
    return s


@pytest.fixture(params=["no segment", "segments"])
def stopped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Sampler, Path]]:
    path = tmp_path / "run.spool"
    if request.param == "no segment":
        s = _record(path, 60.0, 1 << 17)
        assert s.segments is not None and s.segments.segments_written == 0
    else:
        s = _record(path, 0.2, 1024)
        assert s.segments is not None and s.segments.segments_written >= 2
    yield s, path
    s.close()
    remove_spool(path)


def test_after_prepare_a_stop_leaves_the_rest_in_the_spool_where_recover_finds_it(
    stopped: tuple[Sampler, Path],
) -> None:
    """The crash path: a process that dies between the stop and the finish loses no row (no
    last segment was written; the ring holds the rest)."""
    s, path = stopped
    rows_written = s.stats().rows_written
    got = recover(path)
    assert len(got) + got.rows_lost == rows_written
    first = got.to_arrow().column("mono_ns")
    assert pa.compute.all(pa.compute.greater(first[1:], first[:-1])).as_py()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_clean_output_is_what_the_recovery_path_writes(
    stopped: tuple[Sampler, Path], tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rows, columns, metadata and provenance as the output written from the spool and
    its segments read back (the end before: ``write_output``), and the same column statistics;
    only the segments written while the ring needed them are written twice."""
    s, path = stopped
    segments = segment_paths(path)
    clean, recovered = tmp_path / f"clean.{fmt}", tmp_path / f"recovered.{fmt}"
    written = RowsWritten(monkeypatch)
    done = finish(s, clean, command=["train.py"], keep_spool=True, column_stats=True)
    if fmt == "parquet":
        assert written.rows == done.rows  # the finish writes the output, and no segment
    prov = s.provenance(command=["train.py"])
    assert _finish.write_output(path, recovered, prov) == (done.rows, done.columns)
    units = {c.name: c.unit for c in s.columns}
    assert (done.column_stats, done.span_s) == _finish.spool_column_stats(path, units)
    if fmt == "parquet":
        a, b = pq.read_table(clean), pq.read_table(recovered)
        assert a.equals(b)
        assert a.schema.equals(b.schema, check_metadata=True)
        assert from_schema(a.schema) == from_schema(b.schema)
        assert (from_schema(a.schema) or {}).get("cmdline") == ["train.py"]
        assert a.num_rows == done.rows == len(recover(path))
    else:
        a, b = pacsv.read_csv(clean), pacsv.read_csv(recovered)
        assert a.equals(b)
        side = Path(f"{clean}.meta.json").read_text()
        assert side == Path(f"{recovered}.meta.json").read_text()
    assert segments == segment_paths(path)  # no segment was added at the end


def test_a_long_clean_record_writes_each_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run longer than its ring: the segments hold the rows the ring could not keep, as
    pieces of one file, which becomes the output with the rest and one footer: no row is
    written twice (before the pieces, the segments' rows were read back and written again)."""
    path = tmp_path / "long.spool"
    written = RowsWritten(monkeypatch)
    s = _record(path, 0.2, 1024)
    pieces, _ = read_index(path, os.geteuid())
    in_segments = sum(p.rows for p in pieces)
    assert in_segments > 0 and not segment_paths(path)
    before = Path(pieces_path(path)).read_bytes()
    done = finish(s, tmp_path / "long.parquet")
    assert written.rows == done.rows
    out = tmp_path / "long.parquet"
    # The output is the pieces file: its bytes, then the rest's piece and the joined footer.
    assert out.read_bytes()[: len(before)] == before
    assert pq.read_metadata(out).num_rows == done.rows
    assert not path.exists() and not segment_paths(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.parquet"]


@pytest.mark.parametrize("layout", ["pieces", "files"])
def test_a_changed_segment_sends_the_finish_down_the_recovery_path(
    tmp_path: Path, layout: str
) -> None:
    """A segment that is not what its writer wrote (here: removed) is not trusted: the output
    is what the spool and the segments left give, as recover reads them."""
    path = tmp_path / "run.spool"
    s = _record(path, 0.2, 1024, prepare=layout == "pieces")
    if layout == "pieces":
        assert s.segments is not None and s.segments.segments_written >= 2
        Path(pieces_path(path)).unlink()
    else:
        segments = segment_paths(path)
        segments[0].unlink()
    expected = recover(path)
    done = finish(s, tmp_path / "out.parquet", keep_spool=True)
    table = pq.read_table(tmp_path / "out.parquet")
    assert done.rows == table.num_rows == len(expected)
    assert table.column("mono_ns").equals(expected.to_arrow().column("mono_ns"))
    assert table.schema.metadata[b"stroboscope.rows_lost"] == str(expected.rows_lost).encode()
    remove_spool(path)


@pytest.mark.parametrize("crash_safe", [False, True])
def test_finish_needs_a_spool_of_its_own(crash_safe: bool) -> None:
    """Without spool= there is none, or a private one (crash_safe) that goes with the close."""
    s = Sampler(0.01, sources=["cpu"], crash_safe=crash_safe)
    try:
        with pytest.raises(ValueError, match="finish needs a sampler with a spool"):
            finish(s, None)
    finally:
        s.close()


def test_the_training_recorders_long_run_writes_each_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training recorder ends as record does: a run longer than its ring writes its
    segments as pieces of the output's file from the first (it used to prepare at its end,
    after its segments were files, and wrote their rows again)."""
    out = tmp_path / "train.parquet"
    written = RowsWritten(monkeypatch)
    recorder = TrainingRecorder(out, interval=0.001, sources=["memory"], capacity=2048)
    recorder.start()
    assert recorder.sampler is not None
    deadline = time.monotonic() + 60
    segments = recorder.sampler.segments
    while (segments.segments_written if segments else 0) < 2:
        segments = recorder.sampler.segments
        assert time.monotonic() < deadline, "the recorder wrote too few segments"
        time.sleep(0.02)
    assert recorder.finish() == str(out)
    rows = pq.read_metadata(out).num_rows
    assert rows > 0 and written.rows == rows  # the segments written above: not again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]
