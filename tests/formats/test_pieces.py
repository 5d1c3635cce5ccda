"""The pieces file and its index (``formats.pieces``): a crash at any point of an append (a
piece torn anywhere, its index record torn anywhere) leaves every complete piece readable by
its byte range; a damaged record is named; a failed append leaves nothing a reader takes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats import pieces as pieces_mod
from stroboscope.formats.pieces import (
    INDEX_RECORD,
    append_piece,
    encode_piece,
    index_path,
    pieces_path,
    read_index,
    read_piece,
)
from stroboscope.formats.spool_header import SpoolError

UID = os.geteuid()


def _table(k: int) -> pa.Table:
    return pa.table({"mono_ns": pa.array(range(k * 10, k * 10 + 10), pa.int64())})


def _append(spool: Path, k: int) -> bytes:
    data = encode_piece(_table(k))
    append_piece(data, pieces_path(spool), k * 10, 10)
    return data


def _read_all(spool: Path) -> list[pa.Table]:
    got, _ = read_index(spool, UID)
    return [pq.read_table(pa.BufferReader(read_piece(p, UID))) for p in got]


def test_pieces_read_back_by_their_byte_ranges(tmp_path: Path) -> None:
    spool = tmp_path / "r.spool"
    sizes = [len(_append(spool, k)) for k in range(3)]
    got, damage = read_index(spool, UID)
    assert damage is None
    assert [(p.offset, p.length, p.first_row, p.rows) for p in got] == [
        (0, sizes[0], 0, 10),
        (sizes[0], sizes[1], 10, 10),
        (sizes[0] + sizes[1], sizes[2], 20, 10),
    ]
    assert [t.equals(_table(k)) for k, t in enumerate(_read_all(spool))] == [True] * 3
    assert os.stat(pieces_path(spool)).st_mode & 0o777 == 0o600
    assert os.stat(index_path(spool)).st_mode & 0o777 == 0o600


def test_a_crash_at_any_point_of_an_append_keeps_every_complete_piece(tmp_path: Path) -> None:
    """The third append cut at every byte: its piece torn (no record yet), then its record
    torn byte by byte. The two pieces before are always read, the third only once whole."""
    spool = tmp_path / "r.spool"
    for k in range(2):
        _append(spool, k)
    pieces_before = Path(pieces_path(spool)).read_bytes()
    index_before = Path(index_path(spool)).read_bytes()
    third = encode_piece(_table(2))
    record_at = len(pieces_before)
    _append(spool, 2)
    index_whole = Path(index_path(spool)).read_bytes()
    for cut in range(len(third)):  # the piece torn: its record was never written
        Path(pieces_path(spool)).write_bytes(pieces_before + third[:cut])
        Path(index_path(spool)).write_bytes(index_before)
        tables = _read_all(spool)
        assert [t.equals(_table(k)) for k, t in enumerate(tables)] == [True, True], cut
    Path(pieces_path(spool)).write_bytes(pieces_before + third)
    for cut in range(INDEX_RECORD.size + 1):  # the record torn: ignored until whole
        Path(index_path(spool)).write_bytes(index_whole[: len(index_before) + cut])
        got, damage = read_index(spool, UID)
        assert damage is None
        assert len(got) == (3 if cut == INDEX_RECORD.size else 2), cut
        assert got[-1].offset == (record_at if cut == INDEX_RECORD.size else got[-1].offset)
    assert [t.equals(_table(k)) for k, t in enumerate(_read_all(spool))] == [True] * 3


def test_a_damaged_record_is_named_and_the_pieces_before_it_kept(tmp_path: Path) -> None:
    spool = tmp_path / "r.spool"
    for k in range(3):
        _append(spool, k)
    raw = bytearray(Path(index_path(spool)).read_bytes())
    raw[INDEX_RECORD.size + 12] ^= 0xFF  # the second record's offset: its CRC no longer holds
    Path(index_path(spool)).write_bytes(bytes(raw))
    got, damage = read_index(spool, UID)
    assert len(got) == 1 and damage is not None and "damaged record at byte 40" in damage


def test_a_record_past_the_end_of_the_file_is_refused_when_read(tmp_path: Path) -> None:
    """A record on disk whose piece is not (a file cut short under it): that piece alone."""
    spool = tmp_path / "r.spool"
    for k in range(2):
        _append(spool, k)
    size = os.path.getsize(pieces_path(spool))
    os.truncate(pieces_path(spool), size - 5)
    got, _ = read_index(spool, UID)
    assert pq.read_table(pa.BufferReader(read_piece(got[0], UID))).equals(_table(0))
    with pytest.raises(SpoolError, match="past the end"):
        read_piece(got[1], UID)


def test_a_failed_append_is_cut_off_and_the_next_piece_goes_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = tmp_path / "r.spool"
    _append(spool, 0)
    size = os.path.getsize(pieces_path(spool))
    real = os.write
    calls = []

    def full(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            real(fd, bytes(data)[: len(data) // 2])  # half of it, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        _append(spool, 1)
    monkeypatch.setattr(os, "write", real)
    assert os.path.getsize(pieces_path(spool)) == size  # cut back off
    assert len(read_index(spool, UID)[0]) == 1
    _append(spool, 2)
    tables = _read_all(spool)
    assert [t.column("mono_ns")[0].as_py() for t in tables] == [0, 20]


def test_only_a_pieces_file_is_appended_to(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must end in"):
        append_piece(b"x", str(tmp_path / "r.spool.seg-000001.parquet"), 0, 1)
    link = Path(pieces_path(tmp_path / "r.spool"))
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        append_piece(encode_piece(_table(0)), str(link), 0, 10)
    assert not (tmp_path / "elsewhere").exists()
    assert pieces_mod.is_pieces_path(str(link))


def test_a_piece_is_on_disk_before_its_index_record_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pieces file is fsynced after each piece is written and before its record is
    appended (a record never names bytes a power cut can take); the index is fsynced too."""
    spool = tmp_path / "r.spool"
    real = os.fsync
    synced: list[tuple[str, int, int]] = []  # (file, its size, the index's size) at each fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        index = os.path.getsize(index_path(spool)) if os.path.exists(index_path(spool)) else 0
        synced.append((name, os.fstat(fd).st_size, index))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    data = _append(spool, 0)
    pieces, index = os.path.realpath(pieces_path(spool)), os.path.realpath(index_path(spool))
    assert (pieces, len(data), 0) in synced  # the whole piece, before any record
    assert synced[-1] == (index, INDEX_RECORD.size, INDEX_RECORD.size)
    assert [name for name, _, _ in synced].index(pieces) < len(synced) - 1


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_pieces_file_of_another_user_is_never_appended_to(tmp_path: Path) -> None:
    path = Path(pieces_path(tmp_path / "r.spool"))
    path.write_bytes(b"theirs")
    os.chown(path, 65534, 65534)  # nobody's
    with pytest.raises(OSError, match="not a regular file of this user"):
        append_piece(encode_piece(_table(0)), str(path), 0, 10)
    assert path.read_bytes() == b"theirs"
