"""The cells and validity of a range of a spool's rows, out of its mapping, for each layout.

Version 2 (row blocks, ``cpp/include/stroboscope/spool.hpp``): block ``k`` holds the rows ``j``
with ``(j // 64) % blocks == k``, row ``j`` at ``r = j % 64``. In a block the columns go in
groups of 8 (the last may have fewer, ``n``): group ``g`` starts at word ``520 g`` and holds the
64 cells of each of its columns ``8g + i`` (word ``64 i + r``), then their validity words (word
``64 n + i``, bit ``r``, little-endian).
Version 1 (before the blocks): one array of ``capacity`` cells per column, then one array of
validity words per column. Only the rows asked for are copied (never the whole file).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stroboscope.formats.spool_header import BLOCK_ROWS, GROUP_COLUMNS, block_words, blocks

Cells = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def read_rows(view: memoryview, h: dict[str, Any], first: int, n: int) -> Cells:
    """``(cells, valid)`` of rows ``[first, first + n)``: uint64 cells and one uint8 (0 or 1) per
    cell, both shaped ``(columns, n)`` and copied out of ``view`` (the mapped spool, whose header
    ``h`` has been checked)."""
    if h["version"] == 1:
        return _read_rows_v1(view, h, first, n)
    return _read_rows_v2(view, h, first, n)


def _read_rows_v2(view: memoryview, h: dict[str, Any], first: int, n: int) -> Cells:
    ncols, nblocks, width = h["columns"], blocks(h["capacity"]), block_words(h["columns"])
    if n == 0:
        return np.empty((ncols, 0), np.uint64), np.empty((ncols, 0), np.uint8)
    ring = np.frombuffer(view, np.uint64, nblocks * width, h["header_size"])
    start = first // BLOCK_ROWS
    stop = (first + n + BLOCK_ROWS - 1) // BLOCK_ROWS
    # The blocks holding the rows, in row order (the range wraps around the ring at most once;
    # a full ring's first and last blocks are the same block, taken twice).
    picked = ring.reshape(nblocks, width)[np.arange(start, stop) % nblocks]
    del ring
    cell_at, valid_at = _offsets_v2(ncols)
    cells = picked[:, cell_at[:, None] + np.arange(BLOCK_ROWS)]  # (blocks, columns, 64)
    cells = cells.transpose(1, 0, 2).reshape(ncols, -1)
    vwords = np.ascontiguousarray(picked[:, valid_at].T)  # (columns, blocks)
    bits = np.unpackbits(vwords.view(np.uint8), axis=1, bitorder="little")  # little-endian words
    lead = first - start * BLOCK_ROWS
    return cells[:, lead : lead + n], bits[:, lead : lead + n]


def _offsets_v2(ncols: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Word offsets, in a version-2 block, of each column's first cell and validity word."""
    c = np.arange(ncols)
    group = c // GROUP_COLUMNS
    in_group = np.minimum(GROUP_COLUMNS, ncols - group * GROUP_COLUMNS)
    base = group * (GROUP_COLUMNS * BLOCK_ROWS + GROUP_COLUMNS)
    return base + (c % GROUP_COLUMNS) * BLOCK_ROWS, base + in_group * BLOCK_ROWS + c % GROUP_COLUMNS


def _read_rows_v1(view: memoryview, h: dict[str, Any], first: int, n: int) -> Cells:
    cap, ncols, words = h["capacity"], h["columns"], h["words"]
    cells = np.frombuffer(view, np.uint64, ncols * cap, h["header_size"]).reshape(ncols, cap)
    vwords = np.frombuffer(
        view, np.uint64, ncols * words, h["header_size"] + 8 * ncols * cap
    ).reshape(ncols, words)
    # One or two runs of slots (the ring wraps once at most).
    start = first % cap
    runs = [(start, start + n)] if start + n <= cap else [(start, cap), (0, start + n - cap)]
    copied = np.concatenate([cells[:, a:b] for a, b in runs], axis=1)
    valid = np.concatenate([_validity_v1(vwords, a, b) for a, b in runs], axis=1)
    return copied, valid


def _validity_v1(vwords: np.ndarray[Any, Any], a: int, b: int) -> np.ndarray[Any, Any]:
    """Validity of slots ``[a, b)`` of every column, one uint8 (0 or 1) per cell."""
    w0 = a // 64
    part = np.ascontiguousarray(vwords[:, w0 : (b + 63) // 64]).view(np.uint8)
    bits = np.unpackbits(part, axis=1, bitorder="little")  # the layout is little-endian
    return bits[:, a - 64 * w0 : b - 64 * w0]
