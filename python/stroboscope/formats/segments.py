"""A spool's Parquet segments: their names, their length, and reading them back.

Names: the segments of the spool ``PATH`` are ``PATH.seg-000001.parquet``,
``PATH.seg-000002.parquet``, ... (:func:`segment_path`: the one rule every writer, reader and
check uses), each written under a temporary name first (:func:`segment_temp_glob`). Length: a
segment holds a quarter of what the ring holds (:func:`segment_seconds`), so the ring always
keeps the rows of the one being written.

Reading: each segment is checked against its spool: a regular file of the spool's owner, the
spool's columns, a ``stroboscope.first_row`` the spool's counters cover, rows in order
(:func:`stroboscope.formats.spool_read.recover_parts` plans and reads with these). A segment is
a file of its own or a piece of the spool's pieces file (:mod:`stroboscope.formats.pieces`, the
layout of a recording that ends in one output): both are read the same way here."""

from __future__ import annotations

import glob
import mmap
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stroboscope._base.files import fd_source
from stroboscope.formats.parquet_footer import (
    footer_metadata,
    footer_rows,
    footer_span,
    read_footer_of,
)
from stroboscope.formats.pieces import Piece, open_owned, pieces_path, read_piece
from stroboscope.formats.spool_header import SpoolError

Segment = str | Piece
"""A segment: the path of a segment file, or a piece of the spool's pieces file."""

FIRST_ROW_KEY = b"stroboscope.first_row"
_STORED_FIELD_KEYS = (b"unit", b"kind")
"""The field metadata a recording's file keeps (the spool's header holds no more)."""
_ROW_INDEX_RE = re.compile(r"[0-9]{1,19}")

SEGMENT_INFIX = ".seg-"
"""What follows a spool's path in the name of each of its segments."""
_SEGMENT_RE = re.compile(r"^(?P<base>.+)\.seg-(?P<index>[0-9]+)\.parquet$")


def stored_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a recording's file keeps it: every column nullable, each field's unit and
    kind, no table metadata (the columns a spool's header holds, which ``recover`` gives). The
    pieces of a recording that ends in one output are written so: that output is its pieces."""
    fields = []
    for f in schema:
        meta = {k: v for k, v in (f.metadata or {}).items() if k in _STORED_FIELD_KEYS}
        fields.append(pa.field(f.name, f.type, nullable=True, metadata=meta))
    return pa.schema(fields)


def segment_path(spool: str | os.PathLike[str], index: int) -> str:
    """The name of the spool's segment number ``index`` (from 1): ``SPOOL.seg-000001.parquet``."""
    return f"{os.fspath(spool)}{SEGMENT_INFIX}{index:06d}.parquet"


def parse_segment_name(name: str) -> tuple[str, int] | None:
    """``(spool, index)`` of a segment's file name or path (:func:`segment_path` backwards),
    None for any other name."""
    m = _SEGMENT_RE.match(name)
    return None if m is None else (m.group("base"), int(m.group("index")))


def is_segment_name(path: str, spool: str) -> bool:
    """Whether ``path`` is named like one of ``spool``'s segments (or its temporary files)."""
    return path.startswith(spool + SEGMENT_INFIX)


def segment_paths(spool: str | os.PathLike[str]) -> list[Path]:
    """The segment files written beside ``spool``, in order."""
    base = os.fspath(spool)
    found = []
    for name in glob.glob(glob.escape(base) + SEGMENT_INFIX + "*.parquet"):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[0] == base:
            found.append((parsed[1], Path(name)))
    return [p for _, p in sorted(found)]


def last_segment_index(spool: str | os.PathLike[str]) -> int:
    """The largest segment index beside ``spool`` (0 when there is none)."""
    indices = [parsed[1] for p in segment_paths(spool) if (parsed := parse_segment_name(str(p)))]
    return max(indices, default=0)


def segment_temp_glob(spool: str | os.PathLike[str]) -> str:
    """A glob of the temporary files of the spool's segments (``.NAME.seg-*.parquet.*.tmp`` in
    its directory: :func:`stroboscope._base.files.replace_private` names them so), left behind by
    a writer that died half-way."""
    directory, name = os.path.split(os.fspath(spool))
    return os.path.join(
        glob.escape(directory), glob.escape("." + name) + SEGMENT_INFIX + "*.parquet.*.tmp"
    )


SEGMENT_SHARE = 4
"""A segment holds at most 1/4 of the ring's rows in time: the ring keeps the segment being
written whole while the next one fills."""


def segment_seconds(capacity: int, interval: float, *, most: float | None = None) -> float:
    """Seconds of rows per segment for a ring of ``capacity`` rows taken every ``interval``
    seconds: a quarter of what the ring holds, at least one interval, at most ``most``."""
    seconds = max(interval, capacity * interval / SEGMENT_SHARE)
    return seconds if most is None else min(most, seconds)


def segment_rows(capacity: int) -> int:
    """Rows that start a segment early (before its seconds are up): half the ring."""
    return max(capacity // 2, 1)


def open_segment(seg: str, uid: int) -> tuple[int, os.stat_result]:
    """A segment opened read-only: a regular file (no symlink followed) of the spool's owner."""
    return open_owned(seg, "segment", uid)


def _parquet(seg: Segment, uid: int, read: Any) -> Any:
    """``read(pq.ParquetFile)`` of the segment ``seg`` (a file of the spool's owner, or a
    piece of its pieces file); SpoolError when it cannot be read as Parquet."""
    try:
        if isinstance(seg, Piece):
            return read(pq.ParquetFile(pa.BufferReader(read_piece(seg, uid))))
        fd, _st = open_segment(seg, uid)
        try:
            return read(pq.ParquetFile(fd_source(fd)))  # pyarrow's own file, never a Python one
        finally:
            os.close(fd)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise SpoolError(f"segment {seg} cannot be read as Parquet: {exc}") from None


def segment_schema(seg: Segment, uid: int) -> pa.Schema:
    """A segment's columns, from its footer alone (SpoolError when it cannot be read)."""
    schema: pa.Schema = _parquet(seg, uid, lambda pf: pf.metadata.schema.to_arrow_schema())
    return schema


def claimed_rows(seg: Segment, uid: int) -> tuple[int, int] | None:
    """The rows ``[first, end)`` a segment that cannot be read should have held: a piece's
    from its index record, a file's from its footer when that reads; None when unknown."""
    if isinstance(seg, Piece):
        return seg.first_row, seg.first_row + seg.rows
    try:
        meta, n = _parquet(seg, uid, lambda pf: (pf.schema_arrow.metadata, pf.metadata.num_rows))
        raw = (meta or {}).get(FIRST_ROW_KEY, b"").decode("ascii", "replace")
    except SpoolError:
        return None
    return (int(raw), int(raw) + n) if _ROW_INDEX_RE.fullmatch(raw) else None


def check_schema(seg: Segment, schema: pa.Schema, want: list[tuple[str, pa.DataType]]) -> None:
    got = [(fld.name, fld.type) for fld in schema]
    if got != want:
        diff = next(
            (
                f"{g[0]} ({g[1]}) where the spool has {w[0]} ({w[1]})"
                for g, w in zip(got, want)
                if g != w
            ),
            f"{len(got)} columns where the spool has {len(want)}",
        )
        raise SpoolError(f"segment {seg} has another schema than its spool: column {diff}")


def segment_extent(
    seg: Segment, h: dict[str, Any], want: list[tuple[str, pa.DataType]]
) -> tuple[int, int]:
    """``(first row, rows)`` of a segment, from its Parquet footer, checked as when it is read
    (a piece: also against its index record)."""
    schema, n = _parquet(
        seg, h["uid"], lambda pf: (pf.metadata.schema.to_arrow_schema(), pf.metadata.num_rows)
    )
    check_schema(seg, schema, want)
    first = first_row(seg, schema.metadata, n, h["head"])
    if isinstance(seg, Piece) and (first, n) != (seg.first_row, seg.rows):
        raise SpoolError(
            f"segment {seg} holds rows {first}+{n} where its index record says "
            f"{seg.first_row}+{seg.rows}"
        )
    return first, n


def read_segment(
    seg: Segment,
    uid: int,
    want: list[tuple[str, pa.DataType]],
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """A segment read whole (it is one segment's rows), or only its ``columns``, checked to
    be a regular file of the spool's owner (or a piece of one) with the spool's columns."""
    keep = None if columns is None else list(columns)
    table = _parquet(seg, uid, lambda pf: pf.read(columns=keep))
    if columns is not None:
        want = [w for w in want if w[0] in set(columns)]
    check_schema(seg, table.schema, want)
    return table


def first_row(seg: Segment, metadata: dict[bytes, bytes] | None, rows: int, head: int) -> int:
    """The segment's ``stroboscope.first_row``: a row index whose rows the spool has counted."""
    key = FIRST_ROW_KEY.decode()
    raw = (metadata or {}).get(FIRST_ROW_KEY)
    if raw is None:
        raise SpoolError(f"segment {seg} has no {key} metadata")
    text = raw.decode("ascii", "replace")
    if not _ROW_INDEX_RE.fullmatch(text):
        raise SpoolError(f"segment {seg} has metadata {key} = {text[:40]!r}, not a row index")
    first = int(text)
    if first + rows > head:
        raise SpoolError(
            f"segment {seg} has metadata {key} = {first} with {rows} rows, past the "
            f"{head} rows its spool's head field counts"
        )
    return first


SCAN_TRIES = 64
"""Ends tried for one candidate piece when a pieces file is read without its index (each
``PAR1`` after its start whose footer reads; a piece's own data rarely holds one)."""


def scan_pieces(spool: str | os.PathLike[str], uid: int, start: int, number: int) -> list[Piece]:
    """The complete pieces in the spool's pieces file from byte ``start`` on, found by their
    own bytes, for a pieces file whose index is missing, empty, damaged or behind (a crash
    between a piece and its record): each is a whole Parquet file (``PAR1`` at both ends, a
    footer whose column chunks run from byte 4 up to it, a ``stroboscope.first_row``), and
    bytes that are none (a torn append, a joined footer) are passed over. Numbered from
    ``number``. SpoolError when the file is not a regular file of ``uid``."""
    path = pieces_path(spool)
    fd, st = open_owned(path, "pieces file", uid)
    try:
        if st.st_size <= start:
            return []
        data = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    found: list[Piece] = []
    with data:
        at = data.find(b"PAR1", start)
        while at >= 0:
            end = data.find(b"PAR1", at + 8)
            for _ in range(SCAN_TRIES):
                if end < 0:
                    break
                size = end + 4 - at

                def read(offset: int, n: int, at: int = at) -> bytes:
                    return data[at + offset : at + offset + n]

                try:
                    meta = read_footer_of(read, size)
                    footer = size - 8 - int.from_bytes(read(size - 8, 4), "little")
                    raw = footer_metadata(meta).get(FIRST_ROW_KEY, b"")
                    if footer_span(meta) == (4, footer) and _ROW_INDEX_RE.fullmatch(raw.decode()):
                        rows = footer_rows(meta)
                        found.append(Piece(path, number + len(found), at, size, int(raw), rows))
                        break
                except (ValueError, KeyError, IndexError, AttributeError, TypeError):
                    pass  # not a whole piece that ends here (FooterError is a ValueError)
                end = data.find(b"PAR1", end + 1)
            if found and found[-1].offset == at:
                at = data.find(b"PAR1", at + found[-1].length)
            else:
                at = data.find(b"PAR1", at + 1)
    return found


def check_clock(seg: Segment, table: pa.Table, anchor_ns: int) -> None:
    """Every row of a segment read with ``time`` and ``mono_ns`` must have its spool's clock
    anchor (``time - mono_ns``): a segment of another recording has its own."""
    if table.num_rows == 0:
        return
    time = table.column("time").cast(pa.int64()).to_numpy(zero_copy_only=False)
    mono = table.column("mono_ns").to_numpy(zero_copy_only=False)
    if np.any(time - mono != anchor_ns):
        raise SpoolError(
            f"segment {seg} has rows whose time - mono_ns is not its spool's clock anchor "
            f"{anchor_ns}: not written by the same recording"
        )


def check_order(name: Segment, table: pa.Table, last_mono: int) -> int:
    """``last_mono`` after ``table``, whose mono_ns must go on from it without going back."""
    if table.num_rows == 0:
        return last_mono
    mono = table.column("mono_ns").to_numpy(zero_copy_only=False)
    if mono[0] < last_mono or np.any(np.diff(mono) < 0):
        raise SpoolError(
            f"{name} has rows out of order (mono_ns goes back): its {FIRST_ROW_KEY.decode()} or "
            f"the spool's counters do not match the rows"
        )
    return int(mono[-1])


def header_from_segments(spool: str, segments: Sequence[Segment], why: str) -> dict[str, Any]:
    """What a spool whose own header cannot be read (``why``) tells of its run, taken from its
    first readable segment: the columns (``fields`` is then the Arrow schema ``schema``), the
    clock anchor (``time - mono_ns`` of its first row) and the owner (the spool file's). The
    pid, interval and creation time are unknown (None). SpoolError when no segment helps."""
    try:
        uid = os.lstat(spool).st_uid
    except OSError:
        raise SpoolError(why) from None
    for seg in segments:
        try:
            schema, first = _parquet(
                seg,
                uid,
                lambda pf: (
                    pf.schema_arrow,
                    pf.read_row_group(0, columns=["time", "mono_ns"]).slice(0, 1),
                ),
            )
            anchor = first.column("time").cast(pa.int64())[0].as_py() - first["mono_ns"][0].as_py()
        except (OSError, ValueError, KeyError, IndexError, TypeError, pa.ArrowException):
            continue  # SpoolError is a ValueError
        return {
            "uid": uid,
            "anchor_ns": anchor,
            "head": 1 << 62,  # no counters: any first_row is believed, the order still checked
            "pid": None,
            "interval_ns": None,
            "created_ns": None,
            "schema": schema.remove_metadata(),
        }
    raise SpoolError(f"{why}; and no segment beside it can be read to take the columns from")
