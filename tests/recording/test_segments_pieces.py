"""A recording prepared for its finish writes its segments as pieces of one file: a crash
(the process gone, the pieces file or its index cut anywhere in the last append) recovers every
complete piece and the ring's rows, in order and once, without the extension."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats.pieces import INDEX_RECORD, index_path, pieces_path, read_index, read_piece
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.spool_read import recover_parts, remove_spool
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover

UID = os.geteuid()


def _pieces_written(s: Sampler) -> int:
    status = s.segments
    return 0 if status is None else status.segments_written


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Path]:
    """A stopped recording of a few pieces whose first rows the ring no longer holds."""
    path = tmp_path / "r.spool"
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.05, capacity=512)
    _finish.prepare(s)
    with s:
        deadline = time.monotonic() + 60
        while s.stats().rows_written < 1200 or _pieces_written(s) < 4:
            assert time.monotonic() < deadline, "the sampler wrote too few pieces"
            time.sleep(0.02)
    yield path
    s.close()
    remove_spool(path)


def _mono(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column("mono_ns").to_numpy(zero_copy_only=False))


def _piece_rows(path: Path) -> list[np.ndarray]:
    got, _ = read_index(path, UID)
    return [_mono(pq.read_table(pa.BufferReader(read_piece(p, UID)))) for p in got]


def _check(path: Path, must: list[np.ndarray]) -> None:
    got = recover(path)
    mono = _mono(got.to_arrow())
    assert np.all(np.diff(mono) > 0), "rows out of order or twice"
    for rows in must:
        assert np.isin(rows, mono).all(), "a complete piece's rows were not recovered"


def test_pieces_and_the_ring_recover_every_row_once(spool: Path) -> None:
    assert not segment_paths(spool) and os.path.exists(pieces_path(spool))
    pieces = _piece_rows(spool)
    assert len(pieces) >= 4
    got = recover(spool)
    mono = _mono(got.to_arrow())
    assert np.array_equal(mono[: sum(map(len, pieces))], np.concatenate(pieces))
    _check(spool, pieces)


def test_a_crash_anywhere_in_the_last_append_recovers_every_complete_piece(spool: Path) -> None:
    data = Path(pieces_path(spool)).read_bytes()
    index = Path(index_path(spool)).read_bytes()
    pieces = _piece_rows(spool)
    last, _ = read_index(spool, UID)
    start = last[-1].offset
    before = pieces[:-1]
    try:
        for cut in sorted({0, 1, 7, (len(data) - start) // 2, len(data) - start - 1}):
            # The last piece torn: its record never written.
            Path(pieces_path(spool)).write_bytes(data[: start + cut])
            Path(index_path(spool)).write_bytes(index[: -INDEX_RECORD.size])
            _check(spool, before)
        Path(pieces_path(spool)).write_bytes(data)
        for cut in range(0, INDEX_RECORD.size, 5):  # its record torn
            Path(index_path(spool)).write_bytes(index[: len(index) - INDEX_RECORD.size + cut])
            _check(spool, before)
        Path(index_path(spool)).unlink()  # no index at all: the ring's rows, none twice
        _check(spool, [])
    finally:
        Path(pieces_path(spool)).write_bytes(data)
        Path(index_path(spool)).write_bytes(index)
    _check(spool, pieces)


def test_a_damaged_piece_loses_only_its_own_rows(spool: Path) -> None:
    pieces = _piece_rows(spool)
    got, _ = read_index(spool, UID)
    raw = bytearray(Path(pieces_path(spool)).read_bytes())
    middle = got[1]
    raw[middle.offset + middle.length - 8 : middle.offset + middle.length - 4] = b"\xff" * 4
    Path(pieces_path(spool)).write_bytes(bytes(raw))
    assert any("piece 1" in why for why in recover_parts(spool).skipped)
    _check(spool, [pieces[0], *pieces[2:]])


def test_recovering_pieces_loads_no_extension(spool: Path, tmp_path: Path) -> None:
    """The crash handler reads pieces with the formats alone, as the watchdog child does."""
    code = (
        "import json, sys\n"
        "from stroboscope.recording.spool import recover\n"
        "got = recover(sys.argv[1])\n"
        "print(json.dumps([len(got), 'stroboscope._core' in sys.modules]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(spool)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    rows, loaded = json.loads(out.stdout)
    assert rows == len(recover(spool)) and loaded is False
