"""Recovery counts every row (``formats.spool_read.recover_parts``): whatever is damaged, each
row the spool's counters count is either in the parts or in ``rows_lost``, blamed on its real
cause, and ``rows`` is what the parts hold. A piece whose data is corrupt under a footer that
reads, a bit flipped in the spool's schema text, a missing or empty pieces index, a spool whose
ring cannot be read."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats.pieces import index_path, pieces_path, read_index, read_piece
from stroboscope.formats.spool_header import FIELDS, SCHEMA_OFFSET
from stroboscope.formats.spool_read import (
    LOST_TO_KEY,
    NOTES_KEY,
    ROWS_LOST_KEY,
    Recovered,
    recover_parts,
)
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler

UID = os.geteuid()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stopped recording of several pieces whose first rows the ring no longer holds (made
    once: each test damages a copy)."""
    path = tmp_path_factory.mktemp("recorded") / "r.spool"
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.05, capacity=512)
    _finish.prepare(s)
    try:
        with s:
            deadline = time.monotonic() + 60
            while s.stats().rows_written < 1500 or len(read_index(path, UID)[0]) < 5:
                assert time.monotonic() < deadline, "the sampler wrote too few pieces"
                time.sleep(0.02)
    finally:
        s.close()
    yield path


@pytest.fixture
def spool(recorded: Path, tmp_path: Path) -> Path:
    """A copy of the recording to damage."""
    for name in os.listdir(recorded.parent):
        shutil.copy2(recorded.parent / name, tmp_path / name)
    return tmp_path / recorded.name


def _head(path: Path) -> int:
    """Rows the spool's header counts (its ``head`` field), read here by its offset."""
    with open(path, "rb") as f:
        f.seek(FIELDS["head"][0])
        return int.from_bytes(f.read(8), "little")


def _read(path: Path) -> tuple[Recovered, pa.Table]:
    got = recover_parts(path)
    table = pa.Table.from_batches([b for part in got.parts for b in part.to_batches()], got.schema)
    return got, table


def _mono(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column("mono_ns").to_numpy(zero_copy_only=False))


def _check_counted(path: Path, got: Recovered, table: pa.Table, head: int) -> None:
    """``rows`` is what the parts hold; with ``rows_lost``, every row the counters count."""
    assert table.num_rows == got.rows
    assert got.rows + got.rows_lost == head
    assert sum(got.lost_to.values()) == got.rows_lost
    meta = table.schema.metadata
    assert int(meta[ROWS_LOST_KEY.encode()]) == got.rows_lost
    mono = _mono(table)
    assert np.all(np.diff(mono) > 0), "rows out of order or twice"


def test_an_intact_recording_counts_every_row(spool: Path) -> None:
    got, table = _read(spool)
    _check_counted(spool, got, table, _head(spool))
    assert got.rows_lost == 0 and got.skipped == [] and got.notes == []


def test_a_piece_whose_data_is_corrupt_under_a_good_footer_is_counted_lost(spool: Path) -> None:
    """Item 12: the footer reads, a metric column's pages do not: the piece is left out when
    the rows are planned, its rows counted lost (blamed on the piece), never as recovered."""
    pieces, _ = read_index(spool, UID)
    _, whole = _read(spool)
    victim = pieces[1]
    data = read_piece(victim, UID)
    lost = _mono(pq.read_table(pa.BufferReader(data)))
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    chunk = meta.row_group(0).column(meta.num_columns - 1)  # a metric, not the clock
    at = victim.offset + (chunk.dictionary_page_offset or chunk.data_page_offset)
    with open(pieces_path(spool), "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 24)  # its page header
    got, table = _read(spool)
    _check_counted(spool, got, table, _head(spool))
    assert got.rows_lost == victim.rows == len(lost) > 0
    assert got.lost_to == {"segments": victim.rows}
    assert str(victim) in "; ".join(got.skipped)
    assert np.array_equal(np.setdiff1d(_mono(whole), _mono(table)), lost)


def _schema_text(path: Path) -> tuple[int, bytes]:
    """The offset and bytes of the spool's schema text."""
    size = int.from_bytes(path.read_bytes()[FIELDS["schema_size"][0] :][:4], "little")
    return SCHEMA_OFFSET, path.read_bytes()[SCHEMA_OFFSET : SCHEMA_OFFSET + size]


def _flip(path: Path, at: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ bit]))


@pytest.mark.parametrize("where", ["name", "dtype"])
def test_a_bit_flipped_in_the_schema_text_keeps_every_row(spool: Path, where: str) -> None:
    """Item 13: a column name changed by one bit (the text still reads), or a dtype made
    unknown (it does not): the pieces are read with their own columns, the ring with them
    too, and nothing is lost or blamed on the ring."""
    _, whole = _read(spool)
    offset, text = _schema_text(spool)
    second = text.index(b"\n") + 1  # the line after mono_ns's
    if where == "name":
        _flip(spool, offset + second, 0x01)  # "mem..." -> "lem..."
    else:
        _flip(spool, offset + text.index(b"int64", second) + 3, 0x01)  # int64 -> int74
    got, table = _read(spool)
    _check_counted(spool, got, table, _head(spool))
    assert got.rows_lost == 0 and got.lost_to == {} and got.skipped == []
    assert table.column_names == whole.column_names
    assert table.replace_schema_metadata(None).equals(whole.replace_schema_metadata(None))
    assert len(got.notes) == 1 and "schema" in got.notes[0]
    assert NOTES_KEY.encode() in table.schema.metadata


@pytest.mark.parametrize("damage", ["missing", "empty", "first record damaged"])
def test_a_pieces_file_without_a_usable_index_is_read_by_its_own_bytes(
    spool: Path, damage: str
) -> None:
    """Item 14: the pieces file is read itself (each piece a whole Parquet file): every row
    recovered, a note says so, nothing blamed on the ring."""
    _, whole = _read(spool)
    pieces, _ = read_index(spool, UID)
    index = Path(index_path(spool))
    if damage == "missing":
        index.unlink()
    elif damage == "empty":
        index.write_bytes(b"")
    else:
        _flip(index, 0, 0x01)
    got, table = _read(spool)
    _check_counted(spool, got, table, _head(spool))
    assert got.rows_lost == 0 and got.lost_to == {} and got.skipped == []
    assert np.array_equal(_mono(table), _mono(whole))
    assert any(f"{len(pieces)} piece(s)" in n and "found by reading" in n for n in got.notes)


def test_a_piece_written_after_the_last_record_is_recovered(spool: Path) -> None:
    """A crash between a piece's fsync and its record: the piece is complete, and read."""
    index = Path(index_path(spool))
    index.write_bytes(index.read_bytes()[: -40 * 2])  # the last two records gone
    _, before = _read(spool)
    got, table = _read(spool)
    _check_counted(spool, got, table, _head(spool))
    assert got.rows_lost == 0 and before.num_rows == table.num_rows
    assert any("2 piece(s)" in n for n in got.notes)


def test_the_rows_only_a_damaged_spool_held_are_counted_lost(spool: Path) -> None:
    """Item 15: the spool cut short (its ring gone, its header's counters intact): the pieces'
    rows are recovered and the rows only the ring held are counted lost, blamed on it."""
    head = _head(spool)
    os.truncate(spool, 8192)
    got, table = _read(spool)
    _check_counted(spool, got, table, head)
    assert got.rows_lost > 0 and got.lost_to == {"spool": got.rows_lost}
    assert f"{got.rows_lost} rows, by the {head}" in "; ".join(got.skipped)
    assert LOST_TO_KEY.encode() in table.schema.metadata


def test_a_spool_whose_counters_cannot_be_read_says_the_loss_is_unknown(spool: Path) -> None:
    with open(spool, "r+b") as f:
        f.write(b"NOTSPOOL")
    got, table = _read(spool)
    assert table.num_rows == got.rows > 0
    assert "how many is unknown" in "; ".join(got.skipped)
