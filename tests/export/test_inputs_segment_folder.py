"""A folder of segments whose spool is gone (``*.seg-NNNNNN.parquet``) is read as one run:
rows a retried segment write repeated are kept once, in order, and none other is dropped. The
folder a killed `record` leaves (its segments as pieces of one file) is read whole, with or
without its spool."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import frame
from stroboscope.export.report import build_report
from stroboscope.formats.pieces import pieces_path, read_index, read_piece
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.spool_read import remove_spool
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover

MS = 1_000_000


def segment(first: int, last: int) -> object:
    """Rows ``first..last`` (inclusive) of a run: mono k ms, ``cpu.util_pct`` = k (a value that
    names its row)."""
    rows = list(range(first, last + 1))
    return frame([k * MS for k in rows], {"cpu.util_pct": [float(k) for k in rows]})


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        ([(0, 9), (5, 14)], list(range(15))),  # the second write repeated rows 5..9
        ([(0, 9), (10, 19), (10, 19), (20, 24)], list(range(25))),  # a whole segment twice
        ([(0, 9), (12, 14)], [*range(10), 12, 13, 14]),  # rows lost between: no dedupe there
    ],
)
def test_repeated_rows_are_kept_once(
    tmp_path: Path, segments: list[tuple[int, int]], expected: list[int]
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for index, (first, last) in enumerate(segments, start=1):
        pq.write_table(segment(first, last), folder / f"run.spool.seg-{index:06d}.parquet")
    (series,) = build_report([str(folder)]).series
    assert series.label == "run.spool"
    assert series.table.column("mono_ns").to_pylist() == [k * MS for k in expected]
    assert series.table.column("cpu.util_pct").to_pylist() == [float(k) for k in expected]


@pytest.fixture
def killed_record(tmp_path: Path) -> Iterator[Path]:
    """The folder a `record` killed mid-run leaves: its spool, and its segments as pieces of one
    file with their index (no segment file)."""
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "run.spool"
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.05, capacity=512)
    _finish.prepare(s)  # as record prepares its sampler: segments become pieces
    with s:
        deadline = time.monotonic() + 60
        while (
            s.stats().rows_written < 1200 or (s.segments.segments_written if s.segments else 0) < 3
        ):
            assert time.monotonic() < deadline, "the sampler wrote too few pieces"
            time.sleep(0.02)
    s.close()
    assert not segment_paths(path) and Path(pieces_path(path)).is_file()
    yield folder
    remove_spool(path)


def test_a_killed_records_folder_is_read_with_its_pieces(killed_record: Path) -> None:
    spool = killed_record / "run.spool"
    whole = recover(spool).to_arrow().column("mono_ns").to_pylist()
    (series,) = build_report([str(killed_record)]).series
    assert series.label == "run.spool"
    assert series.table.column("mono_ns").to_pylist() == whole


def test_pieces_whose_spool_is_gone_are_read(killed_record: Path) -> None:
    spool = killed_record / "run.spool"
    uid = os.geteuid()
    pieces, _ = read_index(spool, uid)
    in_pieces = [
        m for p in pieces for m in pq.read_table(pa.BufferReader(read_piece(p, uid)))["mono_ns"]
    ]
    spool.unlink()
    (series,) = build_report([str(killed_record)]).series
    assert series.table.column("mono_ns").to_pylist() == [m.as_py() for m in in_pieces]
    assert len(in_pieces) >= 3
