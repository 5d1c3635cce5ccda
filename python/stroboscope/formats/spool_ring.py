"""A spool's ring read back: the intact rows of the file a sampler maps (``Sampler(spool=)``), as
a table, without the extension (:mod:`stroboscope.formats.spool_read` adds its segments)."""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.formats.spool_cells import read_rows
from stroboscope.formats.spool_header import (
    COUNTERS,
    COUNTERS_OFFSET,
    MAX_NS,
    SpoolError,
    open_regular,
    read_header,
)

__all__ = ["read_ring", "read_spool"]


def _field(name: str, unit: str, dtype: str, kind: str) -> pa.Field:
    if name == "mono_ns":
        typ: pa.DataType = pa.int64()
    else:
        typ = pa.int64() if dtype == "int64" else pa.float64()
    return pa.field(name, typ, nullable=True, metadata={"unit": unit, "kind": kind})


def read_spool(path: str | os.PathLike[str], *, from_row: int = 0) -> tuple[pa.Table, int]:
    """The intact rows of a spool file with index ``>= from_row``, and the index of the first.

    Rows ``[max(0, write_begin - capacity), head)`` are intact; a row being written when the
    writer died is left out. The file's type and header are checked before anything else is
    read; the file is then mapped (never read whole) and only the rows asked for are copied.
    """
    table, first, _ = read_ring(os.fspath(path), from_row)
    return table, first


def read_ring(
    p: str, from_row: int, fields: list[tuple[str, str, str, str]] | None = None
) -> tuple[pa.Table, int, dict[str, Any]]:
    """:func:`read_spool`, and the spool's header as it was read (``fields``: the columns
    to read the ring with when its schema text cannot be read, see
    :func:`~stroboscope.formats.spool_header.read_header`)."""
    fd, st = open_regular(p, "spool")
    try:
        h = read_header(p, fd, st.st_size, fields)
        try:
            data = mmap.mmap(fd, h["total_size"], prot=mmap.PROT_READ)
        except (OSError, ValueError) as exc:
            raise SpoolError(f"{p} cannot be mapped: {exc}") from None
    finally:
        os.close(fd)
    with data:
        table, first = _copy_rows(p, data, h, from_row)
    return table, first, h


def _copy_rows(p: str, data: mmap.mmap, h: dict[str, Any], from_row: int) -> tuple[pa.Table, int]:
    cap = h["capacity"]
    first = max(0, h["write_begin"] - cap, from_row)
    n = max(0, h["head"] - first)
    view = memoryview(data)
    try:
        # Only the rows asked for are copied out of the mapping (never the whole file), with
        # one validity byte per cell; the layout depends on the spool's format version.
        copied, valid = read_rows(view, h, first, n)
    finally:
        view.release()
    # The file may still be written (a live recording): the counters were read before the
    # cells. Read them again; rows whose slots the writer may have reused since are dropped.
    begin_now, _ = COUNTERS.unpack_from(data, COUNTERS_OFFSET)
    drop = max(0, max(h["write_begin"], begin_now) - cap - first)
    if drop:
        copied, valid, first = copied[:, drop:], valid[:, drop:], first + drop
    mono = copied[0].view(np.int64)
    # A header that lies about its counters points at slots no row was written to.
    bad = np.flatnonzero((valid[0] == 0) | (mono < 0) | (mono >= MAX_NS))
    if bad.size:
        raise SpoolError(
            f"{p} has a corrupt header: field head = {h['head']} names row {first + bad[0]}, "
            f"which holds no mono_ns: the counters do not match the rows"
        )
    back = np.flatnonzero(np.diff(mono) < 0)
    if back.size:
        raise SpoolError(
            f"{p} has corrupt rows: mono_ns goes back at row {first + back[0] + 1} (fields "
            f"write_begin/head = {h['write_begin']}/{h['head']} do not match the rows)"
        )
    fields = [_field(*f) for f in h["fields"]]
    arrays = [pa.array(mono + np.int64(h["anchor_ns"]), pa.int64()).cast(pa.timestamp("ns", "UTC"))]
    for c, field in enumerate(fields):
        raw = copied[c]
        values = raw.view(np.int64) if pa.types.is_integer(field.type) else raw.view(np.float64)
        mask = valid[c] == 0
        arrays.append(pa.array(values, field.type, mask=mask if mask.any() else None))
    time_field = pa.field(
        "time", pa.timestamp("ns", "UTC"), metadata={"unit": "ns", "kind": "gauge"}
    )
    schema = pa.schema([time_field, *fields])
    return pa.Table.from_arrays(arrays, schema=schema), first
