"""Segment files have one naming rule (formats/segments.py): the writer's names are the ones the
reader lists, the report groups, the CLI refuses as an output and remove_spool deletes."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest
from stroboscope._base.files import replace_private
from stroboscope.formats.segments import (
    is_segment_name,
    last_segment_index,
    parse_segment_name,
    segment_path,
    segment_paths,
    segment_rows,
    segment_seconds,
    segment_temp_glob,
)


def test_names_round_trip_and_list_in_order(tmp_path: Path) -> None:
    spool = str(tmp_path / "run [1].spool")  # glob characters in the name are literal
    for index in (10, 2, 1):
        Path(segment_path(spool, index)).write_bytes(b"")
    assert segment_path(spool, 2) == spool + ".seg-000002.parquet"
    assert parse_segment_name(segment_path(spool, 1234567)) == (spool, 1234567)
    assert parse_segment_name(spool + ".seg-.parquet") is None
    assert parse_segment_name(spool) is None
    assert [parse_segment_name(str(p)) for p in segment_paths(spool)] == [
        (spool, 1),
        (spool, 2),
        (spool, 10),
    ]
    assert last_segment_index(spool) == 10
    assert last_segment_index(str(tmp_path / "other.spool")) == 0
    assert is_segment_name(segment_path(spool, 3), spool)
    assert not is_segment_name(spool + ".parquet", spool)


def test_the_temp_glob_finds_what_the_writer_leaves_behind(tmp_path: Path) -> None:
    """A segment is written through replace_private; a writer killed half-way leaves its
    temporary file, which remove_spool finds with segment_temp_glob."""
    spool = str(tmp_path / "run.spool")
    seen: list[str] = []
    with pytest.raises(RuntimeError), replace_private(segment_path(spool, 1)):
        seen = [os.path.join(tmp_path, n) for n in os.listdir(tmp_path)]
        raise RuntimeError("killed")
    assert len(seen) == 1
    assert glob.glob(segment_temp_glob(spool)) == []  # removed on error: match the name seen
    Path(seen[0]).write_bytes(b"")
    assert glob.glob(segment_temp_glob(spool)) == seen
    assert glob.glob(segment_temp_glob(str(tmp_path / "run"))) == []


def test_segment_length_from_the_ring() -> None:
    # A quarter of what the ring holds, at least one interval, at most ``most``.
    assert segment_seconds(4096, 0.01) == pytest.approx(10.24)
    assert segment_seconds(4096, 0.01, most=10.0) == 10.0
    assert segment_seconds(2, 0.5) == 0.5
    assert segment_rows(4096) == 2048 and segment_rows(1) == 1
