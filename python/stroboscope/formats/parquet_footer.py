"""Parquet footers: read from a file's tail, and many pieces' footers joined into one.

A Parquet file is ``PAR1``, the column chunks, the footer (``FileMetaData`` in the Thrift compact
protocol, :mod:`stroboscope.formats.thrift_compact`), the footer's length (4 bytes little-endian)
and ``PAR1``. Readers find every chunk through the footer's offsets and ignore bytes no offset
names, so complete Parquet files appended one after another (pieces) become one file by appending
one footer whose row groups are every piece's row groups with their offsets moved by the piece's
start (:func:`joined_footer`). The footer of the whole file (its schema, key-value metadata,
writer and column orders) is taken from a file pyarrow writes of the final schema, so the joined
file says exactly what a file written whole says.

Field numbers are those of ``parquet.thrift`` (the Parquet format's specification).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence

import pyarrow as pa

from stroboscope.formats.thrift_compact import (
    I16,
    I64,
    LIST,
    STRUCT,
    Field,
    Seq,
    Struct,
    ThriftError,
    read_struct,
    write_struct,
)

MAGIC = b"PAR1"
_TAIL = struct.Struct("<I4s")

# FileMetaData
_FM_VERSION, _FM_SCHEMA, _FM_NUM_ROWS, _FM_ROW_GROUPS = 1, 2, 3, 4
_FM_KV, _FM_CREATED_BY, _FM_COLUMN_ORDERS, _FM_ENCRYPTION = 5, 6, 7, 8
# RowGroup
_RG_COLUMNS, _RG_NUM_ROWS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 3, 5, 7
# ColumnChunk
_CC_FILE_PATH, _CC_FILE_OFFSET, _CC_META = 1, 2, 3
_CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_CRYPTO, _CC_ENCRYPTED = 4, 6, 8, 9
# ColumnMetaData: data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset
_CMD_OFFSETS = (9, 10, 11, 14)


class FooterError(ValueError):
    """A piece whose footer cannot be joined (the message says why)."""


def footer_bytes(data: bytes | memoryview) -> memoryview:
    """The footer of the whole Parquet file ``data`` (its Thrift bytes), checked to lie inside
    it. FooterError when ``data`` is not a Parquet file."""
    view = memoryview(data).cast("B")
    if len(view) < 12 or bytes(view[:4]) != MAGIC:
        raise FooterError(f"not a Parquet file ({len(view)} bytes, no {MAGIC!r} at its start)")
    length, magic = _TAIL.unpack(view[-8:])
    if magic != MAGIC:
        raise FooterError(f"no {MAGIC!r} at its end: not a whole Parquet file")
    if length > len(view) - 12:
        raise FooterError(f"a footer of {length} bytes in a file of {len(view)}")
    return view[len(view) - 8 - length : len(view) - 8]


def read_footer(data: bytes | memoryview) -> Struct:
    """The ``FileMetaData`` of the whole Parquet file ``data``, as a Thrift struct."""
    raw = footer_bytes(data)
    try:
        meta, end = read_struct(raw)
    except ThriftError as exc:
        raise FooterError(f"its footer cannot be read: {exc}") from None
    if end != len(raw):
        raise FooterError(f"its footer has {len(raw) - end} bytes after the struct")
    return meta


def read_footer_of(read: Callable[[int, int], bytes], size: int) -> Struct:
    """The ``FileMetaData`` of a Parquet file of ``size`` bytes read through ``read(offset,
    n)`` (its tail only: the footer's length, then the footer)."""
    if size < 12:
        raise FooterError(f"not a Parquet file ({size} bytes)")
    length, magic = _TAIL.unpack(read(size - 8, 8))
    if magic != MAGIC or length > size - 12:
        raise FooterError("no whole footer at its end: not a whole Parquet file")
    return read_footer(MAGIC + read(size - 8 - length, length + 8))


def footer_rows(meta: Struct) -> int:
    """The rows a footer counts (``FileMetaData.num_rows``)."""
    return int(meta[_FM_NUM_ROWS].value)


def footer_metadata(meta: Struct) -> dict[bytes, bytes]:
    """A footer's key-value metadata (the table's schema metadata and ``ARROW:schema``)."""
    kv = meta.get(_FM_KV)
    if kv is None:
        return {}
    out = {}
    for item in kv.value.values:  # KeyValue: 1 key, 2 value (optional)
        if 1 in item:
            out[item[1].value] = item[2].value if 2 in item else b""
    return out


def footer_span(meta: Struct) -> tuple[int, int]:
    """The bytes a footer's row groups name: the first byte of its first column chunk and the
    end of the last chunk, page index or bloom filter (``(4, 4)`` when it has no chunk). A
    file written whole by pyarrow has its chunks from byte 4 up to its footer."""
    start, end = None, 4
    for rg in meta[_FM_ROW_GROUPS].value.values:
        for cc in rg[_RG_COLUMNS].value.values:
            spans = []
            cmd = cc[_CC_META].value if _CC_META in cc else {}
            first = [cmd[f].value for f in (9, 11) if f in cmd]  # data, dictionary page
            if first and 7 in cmd:  # total_compressed_size
                spans.append((min(first), min(first) + cmd[7].value))
            if 14 in cmd and 15 in cmd:  # bloom filter offset, length
                spans.append((cmd[14].value, cmd[14].value + cmd[15].value))
            for at, n in ((_CC_OFFSET_INDEX, 5), (_CC_COLUMN_INDEX, 7)):
                if at in cc and n in cc:
                    spans.append((cc[at].value, cc[at].value + cc[n].value))
            for a, b in spans:
                start = a if start is None else min(start, a)
                end = max(end, b)
    return (4 if start is None else start), end


def footer_of_schema(schema: pa.Schema, compression: str = "zstd") -> Struct:
    """The footer pyarrow writes for ``schema`` (metadata included) with no rows: the schema
    elements, key-value metadata (``ARROW:schema`` with it), writer and column orders a file of
    ``schema`` has."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(schema.empty_table(), sink, compression=compression)
    return read_footer(sink.getbuffer())


def _shift(fields: Struct, ids: Sequence[int], by: int) -> None:
    for fid in ids:
        f = fields.get(fid)
        if f is not None:
            f.value += by


def _moved_row_group(rg: Struct, by: int, ordinal: int) -> Struct:
    out = dict(rg)
    chunks: list[Struct] = []
    for cc in rg[_RG_COLUMNS].value.values:
        if _CC_FILE_PATH in cc or _CC_CRYPTO in cc or _CC_ENCRYPTED in cc:
            raise FooterError("a column chunk in another file, or encrypted, cannot be moved")
        moved = {fid: Field(f.type, f.value) for fid, f in cc.items()}
        _shift(moved, (_CC_FILE_OFFSET, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX), by)
        if _CC_META in cc:
            meta = {fid: Field(f.type, f.value) for fid, f in cc[_CC_META].value.items()}
            _shift(meta, _CMD_OFFSETS, by)
            moved[_CC_META] = Field(STRUCT, meta)
        chunks.append(moved)
    out[_RG_COLUMNS] = Field(LIST, Seq(STRUCT, chunks))
    if _RG_FILE_OFFSET in rg:
        out[_RG_FILE_OFFSET] = Field(I64, rg[_RG_FILE_OFFSET].value + by)
    out[_RG_ORDINAL] = Field(I16, ordinal)
    return dict(sorted(out.items()))


def joined_footer(pieces: Sequence[tuple[int, Struct]], whole: Struct) -> bytes:
    """The footer (with its length and ``PAR1``) that makes pieces appended into one file one
    Parquet file: ``pieces`` are (offset of the piece in the file, its footer); ``whole`` is the
    footer whose schema, key-value metadata, writer and column orders the file gets
    (:func:`footer_of_schema`). Every piece must have ``whole``'s schema; its row groups are
    kept in order with every offset moved by the piece's start and their ordinals renumbered,
    and the rows are summed. FooterError for a piece another schema or one encrypted."""
    schema = whole[_FM_SCHEMA]
    groups: list[Struct] = []
    rows = 0
    for offset, meta in pieces:
        if _FM_ENCRYPTION in meta:
            raise FooterError("an encrypted piece cannot be joined")
        if meta[_FM_SCHEMA] != schema:
            raise FooterError(f"the piece at byte {offset} has another schema than the file")
        for rg in meta[_FM_ROW_GROUPS].value.values:
            if len(groups) >= 1 << 15:
                raise FooterError("more than 32767 row groups")
            groups.append(_moved_row_group(rg, offset, len(groups)))
        rows += meta[_FM_NUM_ROWS].value
    out: Struct = {}
    for fid in (_FM_VERSION, _FM_SCHEMA):
        out[fid] = whole[fid]
    out[_FM_NUM_ROWS] = Field(I64, rows)
    out[_FM_ROW_GROUPS] = Field(LIST, Seq(STRUCT, groups))
    for fid in (_FM_KV, _FM_CREATED_BY, _FM_COLUMN_ORDERS):
        if fid in whole:
            out[fid] = whole[fid]
    raw = write_struct(out)
    return raw + _TAIL.pack(len(raw), MAGIC)
