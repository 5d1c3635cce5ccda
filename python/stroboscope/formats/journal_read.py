"""Reading a receiver's journal into Arrow, a block of lines at a time.

The journal is read in blocks of about :data:`BLOCK_BYTES`; each block's complete lines are
parsed, flattened and turned into one Arrow array per column, and only those arrays are kept. So
reading holds the Arrow form of the rows plus one block of Python rows, not the whole journal as
Python objects (which took about 22 times the journal's size). The columns are still the union of
all rows' keys in order of first appearance; a column's chunks are unified at the end (integers
and floats: float64; anything else that differs between chunks: text, as a column that mixes
types within a chunk is).

Standard library and pyarrow only: the watchdog child reads journals with it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from stroboscope._base.files import open_regular, open_regular_file

BLOCK_BYTES = 1 << 18
"""Bytes of journal read, parsed and converted to Arrow at a time."""


def unique_names(names: list[str]) -> list[str]:
    """``names`` with every repeat renamed: the first of equal names keeps it, each other takes
    the first ``NAME~2``, ``NAME~3``, … that is not among the names (given or taken). Returns
    ``names`` itself when there is no repeat."""
    if len(set(names)) == len(names):
        return names
    taken = set(names)
    seen: set[str] = set()
    out = []
    for name in names:
        if name in seen:
            i = 2
            while f"{name}~{i}" in taken:
                i += 1
            name = f"{name}~{i}"
            taken.add(name)
        seen.add(name)
        out.append(name)
    return out


# -- lines to rows -----------------------------------------------------------------------------


def parse_lines(lines: list[bytes]) -> tuple[list[dict[str, Any]], int]:
    """The rows of complete journal ``lines`` and how many were damaged (not a JSON object)."""
    rows: list[dict[str, Any]] = []
    damaged = 0
    loads = json.loads
    for line in lines:
        if not line:
            continue
        try:
            row = loads(line)
        except (ValueError, RecursionError):
            damaged += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            damaged += 1
    return rows, damaged


def parse_journal(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Rows of a journal's bytes and the number of damaged lines skipped (a torn last line is
    expected after a crash and is not counted)."""
    return parse_lines(data.split(b"\n")[:-1])  # the last piece is b"" or a torn line


def read_journal_rows(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Rows of the journal file ``path`` and the number of damaged lines skipped (all rows in
    memory as Python objects: for tests and small journals; see :func:`read_journal_table`)."""
    with open_regular_file(path, "journal") as f:  # a FIFO: refused, not awaited
        return parse_journal(f.read())


def _collect(row: dict[str, Any], prefix: str, names: list[str], values: list[Any]) -> None:
    for key, value in row.items():
        if isinstance(value, dict):
            _collect(value, f"{prefix}{key}.", names, values)
        else:
            names.append(f"{prefix}{key}")
            values.append(value)


def _flatten(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with nested objects flattened to dotted keys; names that come out equal
    (``{"x.y": 1, "x": {"y": 2}}``) are made unique by :func:`unique_names` (``x.y``,
    ``x.y~2``) in the row's order, depth first."""
    names: list[str] = []
    values: list[Any] = []
    _collect(row, "", names, values)
    return dict(zip(unique_names(names), values))


# -- rows to Arrow -----------------------------------------------------------------------------


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        # a float column's spellings in CSV (nan, inf, -inf), not JSON's NaN and -Infinity
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (valid JSON, not UTF-8) escaped."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def _text_array(texts: list[str | None]) -> pa.Array:
    try:
        return pa.array(texts, pa.string())
    except (pa.ArrowException, ValueError):  # a lone surrogate (valid JSON, not UTF-8)
        return pa.array([None if t is None else _utf8(t) for t in texts], pa.string())


def _column(values: list[Any]) -> pa.Array:
    try:
        array = pa.array(values)
    except (pa.ArrowException, ValueError, OverflowError, TypeError):
        return _text_array([_as_text(v) for v in values])
    if pa.types.is_nested(array.type):  # lists: CSV cannot hold them
        return _text_array([_as_text(v) for v in values])
    return array


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _unify(chunks: list[pa.Array | int]) -> pa.ChunkedArray:
    """One column from its chunks (an int is a run of that many nulls)."""
    types = {c.type for c in chunks if not isinstance(c, int) and c.type != pa.null()}
    if not types:
        target: pa.DataType = pa.null()
    elif len(types) == 1:
        target = types.pop()
    elif all(_is_number(t) for t in types):
        target = pa.float64()
    else:
        target = pa.string()
    out = []
    for c in chunks:
        if isinstance(c, int):
            out.append(pa.nulls(c, target))
        elif c.type == target:
            out.append(c)
        elif c.type == pa.null():
            out.append(pa.nulls(len(c), target))
        elif target == pa.string():
            out.append(_text_array([_as_text(v) for v in c.to_pylist()]))
        else:
            out.append(c.cast(target, safe=False))
    return pa.chunked_array(out, target)


class TableBuilder:
    """Builds one Arrow table from rows added a block at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._chunks: dict[str, list[pa.Array | int]] = {}
        self.rows = 0
        self.damaged = 0

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        """Add ``rows`` (parsed journal lines) as one chunk of every column."""
        n = len(rows)
        if not n:
            return
        flat = [_flatten(r) if any(isinstance(v, dict) for v in r.values()) else r for r in rows]
        names: dict[str, None] = {}
        for r in flat:
            if r.keys() - names.keys():
                names.update(dict.fromkeys(r))
        for name in names:
            chunks = self._chunks.get(name)
            if chunks is None:
                chunks = self._chunks[name] = [self.rows] if self.rows else []
            chunks.append(_column([r.get(name) for r in flat]))
        for name, chunks in self._chunks.items():
            if name not in names:
                chunks.append(n)
        self.rows += n

    def add_lines(self, lines: list[bytes]) -> None:
        """Parse complete journal ``lines`` and add their rows (damaged lines are counted)."""
        rows, damaged = parse_lines(lines)
        self.damaged += damaged
        self.add_rows(rows)

    def table(self) -> pa.Table:
        """The table of every row added: one column per key, missing cells null (a key with a
        lone surrogate is escaped, as text values are: one such row never stops the others)."""
        names = unique_names([_utf8(name) for name in self._chunks])
        return pa.table(dict(zip(names, map(_unify, self._chunks.values()))))


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """An Arrow table of ``rows``: nested objects flattened to dotted keys, the union of the
    keys as columns (in order of first appearance), missing cells null."""
    builder = TableBuilder()
    builder.add_rows(rows)
    return builder.table()


# -- the file ----------------------------------------------------------------------------------


def iter_line_blocks(fd: int, end: int, block: int | None = None) -> Iterator[list[bytes]]:
    """The complete lines of the first ``end`` bytes of ``fd`` (read with ``pread``), a list
    per block of about ``block`` bytes (default :data:`BLOCK_BYTES`); a last line without its
    newline (torn) is left out."""
    block = block or BLOCK_BYTES
    offset = 0
    rest = b""
    while offset < end:
        data = os.pread(fd, min(block, end - offset), offset)
        if not data:
            break
        offset += len(data)
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        if lines:
            yield lines


def read_journal_fd(fd: int, end: int | None = None) -> tuple[pa.Table, int]:
    """The first ``end`` bytes (default: all) of the journal open at ``fd`` as a table, and the
    number of damaged lines skipped."""
    if end is None:
        end = os.fstat(fd).st_size
    builder = TableBuilder()
    for lines in iter_line_blocks(fd, end):
        builder.add_lines(lines)
    return builder.table(), builder.damaged


def read_journal_table(path: str | os.PathLike[str]) -> tuple[pa.Table, int]:
    """The journal file ``path`` as a table, and the number of damaged lines skipped."""
    fd, _st = open_regular(path, "journal")  # a FIFO: refused, not awaited
    try:
        return read_journal_fd(fd)
    finally:
        os.close(fd)


def read_journal(path: str | os.PathLike[str]) -> pa.Table:
    """The journal file ``path`` as an Arrow table (the receiver that writes it:
    :class:`stroboscope.compat.aitune.ParentReceiver`)."""
    return read_journal_table(path)[0]
