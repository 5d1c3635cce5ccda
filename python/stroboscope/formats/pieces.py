"""A spool's segments as pieces of one growing file: the layout a recording whose end writes
one output uses (``recording.finish``), so that end writes no row again.

The pieces of the spool ``PATH`` are appended to ``PATH.seg-pieces`` (:func:`pieces_path`), each
a complete small Parquet file (``PAR1``, its column chunks, its own footer); after each piece is
on disk (fsync), a record is appended to ``PATH.seg-index`` (:func:`index_path`): 40 bytes,
``SPI1``, a CRC-32 of the rest, then the piece's offset, length, first row and rows
(little-endian int64). A crash reader (:func:`read_index`, :func:`read_piece`) takes every
complete record and reads each piece by its byte range: a piece torn by a crash has no record,
a torn last record is ignored, and a failed append leaves bytes no record names (the next piece
goes after them). At a clean end the last piece and one footer joining every piece's
(:mod:`stroboscope.formats.parquet_footer`) are appended and the file is renamed to the output.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import zlib
from dataclasses import dataclass

from stroboscope._base.files import pread_full
from stroboscope.formats.spool_header import SpoolError, open_regular

__all__ = [
    "INDEX_RECORD",
    "Piece",
    "append_index",
    "append_piece",
    "append_tail",
    "encode_piece",
    "index_path",
    "is_pieces_path",
    "pieces_path",
    "pieces_spool",
    "read_index",
    "read_piece",
    "read_piece_range",
]

PIECES_SUFFIX = ".seg-pieces"
"""What follows a spool's path in the name of its pieces file (named like its segments, so an
output of that name is refused as one)."""
INDEX_SUFFIX = ".seg-index"
INDEX_RECORD = struct.Struct("<4sIqqqq")
"""magic, CRC-32 of the 32 bytes after it, offset, length, first row, rows."""
_INDEX_MAGIC = b"SPI1"
_BODY = struct.Struct("<qqqq")


def pieces_path(spool: str | os.PathLike[str]) -> str:
    """The file the spool's pieces are appended to: ``SPOOL.seg-pieces``."""
    return os.fspath(spool) + PIECES_SUFFIX


def index_path(spool: str | os.PathLike[str]) -> str:
    """The index of the spool's pieces: ``SPOOL.seg-index``."""
    return os.fspath(spool) + INDEX_SUFFIX


def is_pieces_path(path: str) -> bool:
    """Whether ``path`` names a pieces file (:func:`pieces_path` of some spool)."""
    return path.endswith(PIECES_SUFFIX)


def pieces_spool(path: str) -> str | None:
    """The spool whose pieces file ``path`` names (:func:`pieces_path` backwards), None for any
    other name."""
    return path[: -len(PIECES_SUFFIX)] if is_pieces_path(path) and path != PIECES_SUFFIX else None


@dataclass(frozen=True)
class Piece:
    """One piece of a pieces file: where it lies and the rows it holds (from its index record)."""

    path: str
    number: int
    offset: int
    length: int
    first_row: int
    rows: int

    def __str__(self) -> str:
        return f"{self.path} piece {self.number} (bytes {self.offset}-{self.offset + self.length})"


def open_owned(path: str, what: str, uid: int) -> tuple[int, os.stat_result]:
    """``path`` opened read-only: a regular file (no symlink followed) of the owner ``uid``."""
    fd, st = open_regular(path, what, follow=False)
    if st.st_uid != uid:
        os.close(fd)
        raise SpoolError(
            f"{what} {path} is owned by uid {st.st_uid}, its spool by uid {uid}: not written "
            f"by the same recording"
        )
    return fd, st


def read_index(spool: str | os.PathLike[str], uid: int) -> tuple[list[Piece], str | None]:
    """The pieces the spool's index names, in order, and why records were left out (None when
    none was): a torn last record is left out silently (a crash while it was written), a
    damaged one and every record after it are named. No index: no pieces."""
    path = index_path(spool)
    try:
        fd, st = open_owned(path, "piece index", uid)
    except SpoolError:
        if not os.path.lexists(path):
            return [], None
        raise
    try:
        data = pread_full(fd, st.st_size, 0)
    finally:
        os.close(fd)
    pieces: list[Piece] = []
    size = INDEX_RECORD.size
    whole = len(data) - len(data) % size
    for at in range(0, whole, size):
        magic, crc, offset, length, first, rows = INDEX_RECORD.unpack_from(data, at)
        body = data[at + 8 : at + size]
        if magic != _INDEX_MAGIC or crc != zlib.crc32(body) or min(offset, length, first, rows) < 0:
            return pieces, f"{path} has a damaged record at byte {at}: it and those after it"
        pieces.append(Piece(pieces_path(spool), len(pieces), offset, length, first, rows))
    return pieces, None


def read_piece(piece: Piece, uid: int) -> bytes:
    """The bytes of ``piece`` (a complete Parquet file), read from its pieces file, a regular
    file of the owner ``uid``. SpoolError when the file is missing or shorter than the piece."""
    fd, st = open_owned(piece.path, "pieces file", uid)
    try:
        if piece.offset + piece.length > st.st_size:
            raise SpoolError(f"{piece} lies past the end of the file ({st.st_size} bytes)")
        return pread_full(fd, piece.length, piece.offset)
    finally:
        os.close(fd)


def read_piece_range(piece: Piece, uid: int, offset: int, n: int) -> bytes:
    """``n`` bytes of ``piece`` from ``offset`` (relative to the piece), for a reader that
    needs its footer only."""
    if offset < 0 or n < 0 or offset + n > piece.length:
        raise SpoolError(f"{piece}: bytes {offset}-{offset + n} are outside it")
    fd, st = open_owned(piece.path, "pieces file", uid)
    try:
        if piece.offset + piece.length > st.st_size:
            raise SpoolError(f"{piece} lies past the end of the file ({st.st_size} bytes)")
        return pread_full(fd, n, piece.offset + offset)
    finally:
        os.close(fd)


def _open_append(path: str) -> int:
    """``path`` open for appending, created 0600 when absent; never through a symlink, and
    only a regular file of this process's user."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(f"{path} is not a regular file of this user: nothing appended")
    return fd


def _append(path: str, data: bytes) -> int:
    """Append ``data`` to ``path`` and fsync it; return the offset it starts at. A failed
    append is cut back off (when the file can be truncated) and raised."""
    fd = _open_append(path)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):  # else: bytes no record names, readers skip them
                os.ftruncate(fd, start)
            raise
        return start
    finally:
        os.close(fd)


def append_index(spool_pieces: str, offset: int, length: int, first_row: int, rows: int) -> None:
    """Append the record of one piece of the pieces file ``spool_pieces`` to its index."""
    body = _BODY.pack(offset, length, first_row, rows)
    record = INDEX_RECORD.pack(_INDEX_MAGIC, zlib.crc32(body), offset, length, first_row, rows)
    _append(spool_pieces[: -len(PIECES_SUFFIX)] + INDEX_SUFFIX, record)


def encode_piece(table: object, compression: str = "zstd") -> bytes:
    """``table`` (a pyarrow Table) as the bytes of a whole Parquet file, written as every
    recording's Parquet is (``compression``; pyarrow's other defaults)."""
    import io

    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, compression=compression)
    return sink.getvalue()


def append_piece(data: bytes, path: str, first_row: int, rows: int) -> int:
    """Append the Parquet file ``data`` (``rows`` rows from ``first_row``) to the pieces file
    ``path`` and then its record to the index; return its offset."""
    if not is_pieces_path(path):
        raise ValueError(f"path must end in {PIECES_SUFFIX!r}, got {path!r}")
    offset = _append(path, data)
    append_index(path, offset, len(data), first_row, rows)
    return offset


def append_tail(path: str, data: bytes) -> int:
    """Append ``data`` (a joined footer) to the pieces file ``path``, with no index record."""
    return _append(path, data)
