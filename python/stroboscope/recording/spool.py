"""Reading spool files back: the ring's file and the Parquet segments beside it, as one frame.

A spool is the sampler's ring kept in a file mapped ``MAP_SHARED`` (``Sampler(spool=PATH)``):
every row is in the file the moment the sampler writes it, so it survives any death of the
process. Its layout is documented in ``cpp/include/stroboscope/spool.hpp``. For runs longer than
the ring holds, a background writer drains the ring into complete Parquet segment files beside
the spool (``PATH.seg-000001.parquet``, ...), each written whole and renamed into place, so a
segment on disk is always readable. :func:`recover` returns every row once, in order: the segments
first, then the rows of the spool that no segment holds.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stroboscope.recording import _layout

if TYPE_CHECKING:
    from stroboscope.sampling import Frame

MAGIC = _layout.MAGIC
VERSION = _layout.VERSION
_SCHEMA_OFFSET = _layout.SCHEMA_OFFSET
_FIELDS = {name: (offset, code) for name, offset, code in _layout.FIELDS}
_COUNTERS = struct.Struct("<QQ")  # write_begin, head: adjacent in the layout
_COUNTERS_OFFSET = _FIELDS["write_begin"][0]
assert _FIELDS["head"][0] == _COUNTERS_OFFSET + 8
FIRST_ROW_KEY = b"stroboscope.first_row"
_SEGMENT_RE = re.compile(r"\.seg-(\d+)\.parquet$")


class SpoolError(ValueError):
    """A file that is not a readable spool: the message says what is wrong with it."""


def segment_paths(spool: str | os.PathLike[str]) -> list[Path]:
    """The segment files written beside ``spool``, in order."""
    base = os.fspath(spool)
    found = []
    for name in glob.glob(glob.escape(base) + ".seg-*.parquet"):
        m = _SEGMENT_RE.search(name)
        if m:
            found.append((int(m.group(1)), Path(name)))
    return [p for _, p in sorted(found)]


def last_segment_index(spool: str | os.PathLike[str]) -> int:
    """The largest segment index beside ``spool`` (0 when there is none)."""
    indices = [int(m.group(1)) for p in segment_paths(spool) if (m := _SEGMENT_RE.search(str(p)))]
    return max(indices, default=0)


def _field(name: str, unit: str, dtype: str, kind: str) -> pa.Field:
    if name == "mono_ns":
        typ: pa.DataType = pa.int64()
    else:
        typ = pa.int64() if dtype == "int64" else pa.float64()
    return pa.field(name, typ, nullable=True, metadata={"unit": unit, "kind": kind})


def _read_header(path: str, buf: memoryview, size: int) -> dict[str, Any]:
    if size == 0:
        raise SpoolError(f"{path} is empty (0 bytes): not a stroboscope spool")
    if size < _SCHEMA_OFFSET:
        if buf[:8].tobytes() != MAGIC[: min(8, size)]:
            raise SpoolError(
                f"{path} is not a stroboscope spool (it does not start with {MAGIC!r})"
            )
        raise SpoolError(f"{path} is truncated: {size} bytes, shorter than a spool header")

    def field(name: str) -> Any:
        offset, code = _FIELDS[name]
        fmt = "<8s" if code == "s" else "<" + code
        return struct.unpack_from(fmt, buf, offset)[0]

    magic, version = field("magic"), field("version")
    header, capacity, ncols = field("header_size"), field("capacity"), field("columns")
    schema_len, anchor, interval = field("schema_size"), field("anchor_ns"), field("interval_ns")
    created, pid, words, total = (
        field("created_ns"),
        field("pid"),
        field("words"),
        field("total_size"),
    )
    if magic != MAGIC:
        raise SpoolError(
            f"{path} is not a stroboscope spool (starts with {magic!r}, expected {MAGIC!r})"
        )
    if version != VERSION:
        raise SpoolError(
            f"{path} is a spool of format version {version}; this stroboscope reads version "
            f"{VERSION}"
        )
    if (
        header % _layout.PAGE
        or header < _SCHEMA_OFFSET + schema_len
        or capacity < 2
        or capacity & (capacity - 1)
        or ncols < 1
        or words != (capacity + 63) // 64
    ):
        raise SpoolError(f"{path} has a corrupt header (capacity {capacity}, {ncols} columns)")
    expected = header + 8 * ncols * capacity + 8 * (ncols * words + 1)
    if total != expected:
        raise SpoolError(f"{path} has a corrupt header (size field {total}, layout {expected})")
    if size < total:
        raise SpoolError(f"{path} is truncated: {size} of {total} bytes")
    try:
        text = buf[_SCHEMA_OFFSET : _SCHEMA_OFFSET + schema_len].tobytes().decode()
    except UnicodeDecodeError:
        raise SpoolError(f"{path} has a corrupt schema (not UTF-8)") from None
    lines = [ln.split("\t") for ln in text.splitlines()]
    if len(lines) != ncols or any(len(f) != 4 for f in lines) or lines[0][0] != "mono_ns":
        raise SpoolError(f"{path} has a corrupt schema ({len(lines)} lines for {ncols} columns)")
    begin, head = _COUNTERS.unpack_from(buf, _COUNTERS_OFFSET)
    if head > begin or begin > head + 1:
        raise SpoolError(f"{path} has corrupt counters (write_begin {begin}, head {head})")
    return {
        "header": header,
        "capacity": capacity,
        "ncols": ncols,
        "anchor": anchor,
        "interval_ns": interval,
        "created_ns": created,
        "pid": pid,
        "words": words,
        "write_begin": begin,
        "head": head,
        "fields": [_field(*f) for f in lines],
    }


def _map_spool(p: str) -> np.ndarray[Any, Any]:
    """The spool file mapped read-only (never read whole into memory); SpoolError for anything
    that is not a regular, non-empty file."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SpoolError(f"{p} does not exist") from None
    except OSError as exc:
        raise SpoolError(f"{p} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpoolError(f"{p} is a directory, not a spool file")
    if not stat.S_ISREG(st.st_mode):
        raise SpoolError(f"{p} is not a regular file (a FIFO, device or socket): not a spool")
    if st.st_size == 0:
        raise SpoolError(f"{p} is empty (0 bytes): not a stroboscope spool")
    try:
        return np.memmap(p, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise SpoolError(f"{p} cannot be mapped: {exc}") from None


def read_spool(path: str | os.PathLike[str], *, from_row: int = 0) -> tuple[pa.Table, int]:
    """The intact rows of a spool file with index ``>= from_row``, and the index of the first.

    Rows ``[max(0, write_begin - capacity), head)`` are intact; a row being written when the
    writer died is left out.
    """
    p = os.fspath(path)
    data = _map_spool(p)
    h = _read_header(p, data.data, len(data))
    cap, ncols, words = h["capacity"], h["ncols"], h["words"]
    first = max(0, h["write_begin"] - cap, from_row)
    end = h["head"]
    n = max(0, end - first)
    slots = (np.arange(first, first + n, dtype=np.uint64) % np.uint64(cap)).astype(np.int64)
    cells = np.frombuffer(data, dtype=np.uint64, count=ncols * cap, offset=h["header"])
    cells = cells.reshape(ncols, cap)
    vwords = np.frombuffer(
        data, dtype=np.uint64, count=ncols * words, offset=h["header"] + 8 * ncols * cap
    ).reshape(ncols, words)
    # Only the rows asked for are copied out of the mapping (never the whole file).
    word_of, bit_of = slots // 64, (slots % 64).astype(np.uint64)
    copied = cells[:, slots]
    valid = (vwords[:, word_of] >> bit_of) & np.uint64(1)
    # The file may still be written (a live recording): the counters were read before the
    # cells. Read them again; rows whose slots the writer may have reused since are dropped.
    begin_now, _ = _COUNTERS.unpack_from(data.data, _COUNTERS_OFFSET)
    drop = max(0, max(h["write_begin"], begin_now) - cap - first)
    if drop:
        copied, valid, first = copied[:, drop:], valid[:, drop:], first + drop
    arrays = []
    arrays.append(
        pa.array(copied[0].view(np.int64) + np.int64(h["anchor"]), pa.int64()).cast(
            pa.timestamp("ns", "UTC")
        )
    )
    for c, field in enumerate(h["fields"]):
        raw = copied[c]
        values = raw.view(np.int64) if pa.types.is_integer(field.type) else raw.view(np.float64)
        mask = valid[c] == 0
        arrays.append(pa.array(values, field.type, mask=mask if mask.any() else None))
    time_field = pa.field(
        "time", pa.timestamp("ns", "UTC"), metadata={"unit": "ns", "kind": "gauge"}
    )
    schema = pa.schema([time_field, *h["fields"]])
    return pa.Table.from_arrays(arrays, schema=schema), first


def recover(path: str | os.PathLike[str]) -> Frame:
    """Every row recorded in a spool and its segments, in order and without duplicates.

    Parameters
    ----------
    path : str or PathLike
        The spool file (``Sampler(spool=...)``; the CLI's ``record`` keeps one beside its output).

    Returns
    -------
    Frame
        Columns ``time``, ``mono_ns`` and the metrics, as a live sampler's frames have them.
        ``rows_lost`` (also the schema metadata ``stroboscope.rows_lost``) counts rows
        overwritten in the ring before a segment could take them (never silently dropped).

    Raises
    ------
    SpoolError
        When the file is missing, empty, truncated, corrupt, or not a spool (wrong magic or
        format version): the message says which.
    """
    spool, first_spool_row = read_spool(path)
    tables: list[pa.Table] = []
    next_row = 0
    lost = 0
    for seg in segment_paths(path):
        try:
            table = pq.read_table(seg)
        except (OSError, pa.ArrowInvalid) as exc:
            raise SpoolError(f"segment {seg} cannot be read: {exc}") from None
        meta = table.schema.metadata or {}
        if FIRST_ROW_KEY not in meta:
            raise SpoolError(f"segment {seg} has no {FIRST_ROW_KEY.decode()} metadata")
        first = int(meta[FIRST_ROW_KEY])
        if first > next_row:
            lost += first - next_row
        skip = max(0, next_row - first)
        if skip < table.num_rows:
            tables.append(table.slice(skip).replace_schema_metadata(None))
        next_row = max(next_row, first + table.num_rows)
    spool_from = max(next_row, first_spool_row)
    lost += max(0, first_spool_row - next_row)
    tables.append(spool.slice(spool_from - first_spool_row))
    schema = spool.schema
    out = pa.concat_tables([t.cast(schema) if t.schema != schema else t for t in tables])
    from stroboscope.sampling._frame import Frame  # the one frame type (pyarrow-backed here)

    table = out.replace_schema_metadata({"stroboscope.rows_lost": str(lost)})
    return Frame(table, rows_lost=lost)


def remove_spool(path: str | os.PathLike[str]) -> None:
    """Delete a spool file and its segments (after their rows were written elsewhere)."""
    for seg in segment_paths(path):
        seg.unlink(missing_ok=True)
    Path(path).unlink(missing_ok=True)
