"""Spools built by hand for the tests of the live view: the version-2 layout as ``spool.hpp``
documents it (``stroboscope.formats.spool_layout`` gives the offsets), written here without the
extension, with rows whose every cell the test chose."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
from stroboscope.formats import spool_layout

ANCHOR_NS = 1_700_000_000 * 10**9


def write_spool(
    path: Path,
    mono_ns: np.ndarray[Any, Any],
    columns: dict[str, tuple[str, np.ndarray[Any, Any]]],
    capacity: int | None = None,
    interval_ns: int = 1_000_000,
) -> Path:
    """A spool holding rows ``mono_ns`` (ascending int64) and the float64 ``columns`` (name to
    ``(unit, values)``; NaN: no value), every row in the ring (``capacity``: the next power of
    two of the rows, at least 64, unless given)."""
    n = len(mono_ns)
    cap = capacity or max(64, 1 << max(0, n - 1).bit_length())
    names = ["mono_ns", *columns]
    schema = "".join(
        f"{name}\t{'ns' if name == 'mono_ns' else columns[name][0]}\t"
        f"{'int64' if name == 'mono_ns' else 'float64'}\tgauge\n"
        for name in names
    ).encode()
    ncols = len(names)
    blocks = max(1, cap // 64)
    width = ncols * 64 + (ncols + 7) // 8 * 8
    ring = np.zeros((blocks, width), np.uint64)
    first = max(0, n - cap)
    j = np.arange(first, n)
    block, r = (j // 64) % blocks, j % 64
    for c, name in enumerate(names):
        g, i = divmod(c, 8)
        in_group = min(8, ncols - 8 * g)
        base = g * 520
        if name == "mono_ns":
            cells = np.asarray(mono_ns[first:], np.int64).view(np.uint64)
            valid = np.ones(len(j), bool)
        else:
            v = np.asarray(columns[name][1][first:], np.float64)
            cells, valid = v.view(np.uint64), ~np.isnan(v)
        ring[block, base + 64 * i + r] = cells
        bits = np.where(valid, np.uint64(1) << r.astype(np.uint64), np.uint64(0))
        words = np.full(len(j), base + 64 * in_group + i, np.int64)
        np.bitwise_or.at(ring, (block.astype(np.int64), words), bits)
    header_size = 4096 * ((spool_layout.SCHEMA_OFFSET + len(schema) + 4095) // 4096)
    values = {
        "magic": spool_layout.MAGIC,
        "version": 2,
        "header_size": header_size,
        "capacity": cap,
        "columns": ncols,
        "schema_size": len(schema),
        "anchor_ns": ANCHOR_NS,
        "interval_ns": interval_ns,
        "created_ns": ANCHOR_NS + 10**9,
        "pid": 4242,
        "block_rows": 64,
        "total_size": header_size + ring.nbytes,
        "write_begin": n,
        "head": n,
    }
    head = bytearray(header_size)
    for name, offset, code in spool_layout.FIELDS:
        struct.pack_into("<8s" if code == "s" else "<" + code, head, offset, values[name])
    head[spool_layout.SCHEMA_OFFSET : spool_layout.SCHEMA_OFFSET + len(schema)] = schema
    path.write_bytes(bytes(head) + ring.tobytes())
    path.chmod(0o600)
    return path
