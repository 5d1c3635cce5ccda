"""Crash-safe recording: reading spool files back, and the rolling Parquet segment writer.

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
import struct
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stroboscope._files import open_private

MAGIC = b"STROBSPL"
VERSION = 1
_HEADER = struct.Struct("<8sIIQIIqqqIIQ")  # through the total file size (offset 72)
_COUNTERS = struct.Struct("<QQ")  # write_begin, head at offset 128
_SCHEMA_OFFSET = 192
_FIRST_ROW_KEY = b"stroboscope.first_row"
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


def _last_segment_index(spool: str | os.PathLike[str]) -> int:
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
    (
        magic,
        version,
        header,
        capacity,
        ncols,
        schema_len,
        anchor,
        interval,
        created,
        pid,
        words,
        total,
    ) = _HEADER.unpack_from(buf, 0)
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
        header % 4096
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
    begin, head = _COUNTERS.unpack_from(buf, 128)
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


def read_spool(path: str | os.PathLike[str], *, from_row: int = 0) -> tuple[pa.Table, int]:
    """The intact rows of a spool file with index ``>= from_row``, and the index of the first.

    Rows ``[max(0, write_begin - capacity), head)`` are intact; a row being written when the
    writer died is left out.
    """
    p = os.fspath(path)
    try:
        data = np.fromfile(p, dtype=np.uint8)
    except FileNotFoundError:
        raise SpoolError(f"{p} does not exist") from None
    except IsADirectoryError:
        raise SpoolError(f"{p} is a directory, not a spool file") from None
    buf = memoryview(data.data)
    h = _read_header(p, buf, len(data))
    # The file may still be written (a live recording): its cells were read after its counters.
    # Read the counters again; slots the writer may have reused since are dropped.
    with open(p, "rb") as f:
        f.seek(128)
        begin_now, _ = _COUNTERS.unpack(f.read(_COUNTERS.size))
    h["write_begin"] = max(h["write_begin"], begin_now)
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
    vbits = np.unpackbits(vwords.view(np.uint8).reshape(ncols, -1), axis=1, bitorder="little")
    arrays = []
    mono = cells[0, slots].view(np.int64)
    arrays.append(
        pa.array(mono + np.int64(h["anchor"]), pa.int64()).cast(pa.timestamp("ns", "UTC"))
    )
    for c, field in enumerate(h["fields"]):
        raw = cells[c, slots]
        values = raw.view(np.int64) if pa.types.is_integer(field.type) else raw.view(np.float64)
        mask = vbits[c, slots] == 0
        arrays.append(pa.array(values, field.type, mask=mask if mask.any() else None))
    time_field = pa.field(
        "time", pa.timestamp("ns", "UTC"), metadata={"unit": "ns", "kind": "gauge"}
    )
    schema = pa.schema([time_field, *h["fields"]])
    return pa.Table.from_arrays(arrays, schema=schema), first


def recover(path: str | os.PathLike[str]) -> pa.Table:
    """Every row recorded in a spool and its segments, in order and without duplicates.

    Parameters
    ----------
    path : str or PathLike
        The spool file (``Sampler(spool=...)``; the CLI's ``record`` keeps one beside its output).

    Returns
    -------
    pyarrow.Table
        Columns ``time``, ``mono_ns`` and the metrics, as :meth:`Frame.to_arrow` gives them. The
        schema metadata ``stroboscope.rows_lost`` counts rows overwritten in the ring before a
        segment could take them (never silently dropped).

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
        if _FIRST_ROW_KEY not in meta:
            raise SpoolError(f"segment {seg} has no {_FIRST_ROW_KEY.decode()} metadata")
        first = int(meta[_FIRST_ROW_KEY])
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
    return out.replace_schema_metadata({"stroboscope.rows_lost": str(lost)})


class SegmentWriter:
    """Drains a sampler's ring into rolling Parquet segments beside its spool.

    Every ``segment_seconds`` (or sooner when ``segment_rows`` rows are waiting) the rows written
    since the last segment are copied out (with the sampler's own consumer API, not its drain
    cursor) and written as one complete Parquet file, renamed into place. The ring must hold a
    segment's worth of rows; rows overwritten before a segment took them are counted in
    :attr:`rows_lost`.
    """

    def __init__(self, core: Any, spool: str, segment_seconds: float, segment_rows: int) -> None:
        self._core = core
        self._spool = spool
        self._seconds = segment_seconds
        self._rows = segment_rows
        self._cursor = 0
        self._seq = _last_segment_index(spool)
        self.rows_lost = 0
        self.segments_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stroboscope-segments", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write what is left as a last segment."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    def _run(self) -> None:
        poll = min(self._seconds / 2, 0.25)
        last = time.monotonic()
        while not self._stop.wait(poll):
            pending = self._core.stats()["rows_written"] - self._cursor
            if time.monotonic() - last >= self._seconds or pending >= self._rows:
                self.flush()
                last = time.monotonic()

    def flush(self) -> None:
        """Write the rows not yet in a segment as a new segment (nothing when there are none)."""
        from stroboscope._frame import Frame

        with self._lock:
            frame = Frame(self._core.copy_since(self._cursor))
            self.rows_lost += frame.rows_lost
            if len(frame) == 0:
                return
            table = frame.to_arrow()
            meta = dict(table.schema.metadata or {})
            meta[_FIRST_ROW_KEY] = str(frame.first_row).encode()
            table = table.replace_schema_metadata(meta)
            self._seq += 1
            final = f"{self._spool}.seg-{self._seq:06d}.parquet"
            tmp = final + ".tmp"
            with open_private(tmp) as f:
                pq.write_table(table, f, compression="zstd")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            self._cursor = frame.first_row + len(frame)
            self.segments_written += 1


def remove_spool(path: str | os.PathLike[str]) -> None:
    """Delete a spool file and its segments (after their rows were written elsewhere)."""
    for seg in segment_paths(path):
        seg.unlink(missing_ok=True)
    Path(path).unlink(missing_ok=True)
