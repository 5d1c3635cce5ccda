"""Parquet footers: read from a file's tail, and many pieces' footers joined into one.

A Parquet file is ``PAR1``, the column chunks, the footer (``FileMetaData`` in the Thrift compact
protocol, :mod:`stroboscope.formats.thrift_compact`), the footer's length (4 bytes little-endian)
and ``PAR1``. Readers find every chunk through the footer's offsets and ignore bytes no offset
names, so complete Parquet files appended one after another (pieces) become one file by appending
one footer whose row groups are every piece's row groups with their offsets moved by the piece's
start (:func:`joined_footer`). The footer of the whole file (its schema, key-value metadata,
writer and column orders) is taken from a file pyarrow writes of the final schema, so the joined
file says exactly what a file written whole says.

A join streams (:class:`FooterJoin`): each piece's footer is walked once over its bytes, its row
groups copied with only their offsets and ordinals written again (an offset moved can take more
varint bytes), the rest skipped; what a join holds is those row groups' bytes, about the size of
the footer it writes, whatever the number of pieces. The struct path (:func:`read_footer`, a
footer parsed whole into :mod:`~stroboscope.formats.thrift_compact` structs) is for reading one
footer, and for the rare row group whose fields a writer put out of id order.

Field numbers are those of ``parquet.thrift`` (the Parquet format's specification).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence

import pyarrow as pa

from stroboscope.formats.thrift_compact import (
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    STOP,
    STRUCT,
    TRUE,
    Field,
    Seq,
    Struct,
    ThriftError,
    field_header,
    list_header,
    read_struct,
    read_value,
    read_varint,
    skip,
    write_fields,
    write_struct,
    write_value,
    zigzag_bytes,
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
    return _parsed(footer_bytes(data))


def _parsed(raw: memoryview) -> Struct:
    """Footer bytes (:func:`footer_bytes`) as a Thrift struct."""
    try:
        meta, end = read_struct(raw)
    except ThriftError as exc:
        raise FooterError(f"its footer cannot be read: {exc}") from None
    if end != len(raw):
        raise FooterError(f"its footer has {len(raw) - end} bytes after the struct")
    return meta


def footer_bytes_of(read: Callable[[int, int], bytes], size: int) -> memoryview:
    """The footer (its Thrift bytes) of a Parquet file of ``size`` bytes read through
    ``read(offset, n)``: its tail only, the footer's length, then the footer."""
    if size < 12:
        raise FooterError(f"not a Parquet file ({size} bytes)")
    length, magic = _TAIL.unpack(read(size - 8, 8))
    if magic != MAGIC or length > size - 12:
        raise FooterError("no whole footer at its end: not a whole Parquet file")
    return footer_bytes(MAGIC + read(size - 8 - length, length + 8))


def read_footer_of(read: Callable[[int, int], bytes], size: int) -> Struct:
    """The ``FileMetaData`` of a Parquet file of ``size`` bytes read through ``read(offset,
    n)`` (its tail only: the footer's length, then the footer)."""
    return _parsed(footer_bytes_of(read, size))


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
    """``rg`` with its offsets moved by ``by`` and its ordinal set, its fields in id order: the
    rule :func:`_move_row_group` follows on the bytes (and the one it falls back to where a
    writer put a row group's fields out of order)."""
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


# --- the same rule on the bytes: a row group copied with only its offsets written again ------

_BITS = {I16: 16, I32: 32, I64: 64}
_CC_MOVED = frozenset((_CC_FILE_OFFSET, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX))
_CC_REFUSED = frozenset((_CC_FILE_PATH, _CC_CRYPTO, _CC_ENCRYPTED))
_CMD_MOVED = frozenset(_CMD_OFFSETS)


class _OutOfOrder(Exception):
    """A row group whose fields are not in id order (the byte walk gives it to the struct path)."""


def _field(data: bytes, pos: int, last: int) -> tuple[int, int, int]:
    """The field whose header is at ``data[pos]`` (not STOP): its id, wire type and where its
    value starts."""
    head = data[pos]
    delta = head >> 4
    if delta:
        return last + delta, head & 0x0F, pos + 1
    n, at = read_varint(data, pos + 1)
    return (n >> 1) ^ -(n & 1), head & 0x0F, at


def _moved_int(data: bytes, pos: int, typ: int, by: int) -> tuple[bytes, int]:
    """The integer of wire type ``typ`` at ``data[pos:]`` moved by ``by``, encoded, and the
    position after the old one."""
    bits = _BITS.get(typ)
    if bits is None:
        raise FooterError(f"an offset of wire type {typ}, not an integer, at byte {pos}")
    n, end = read_varint(data, pos)
    try:
        return zigzag_bytes(((n >> 1) ^ -(n & 1)) + by, bits), end
    except ThriftError as exc:
        raise FooterError(f"an offset moved by {by} does not fit: {exc}") from None


def _move_fields(
    data: bytes,
    pos: int,
    by: int,
    out: bytearray,
    moved: frozenset[int],
    inner: frozenset[int] | None = None,
) -> int:
    """Copy the struct at ``data[pos:]`` into ``out`` with its integer fields ``moved`` moved by
    ``by``; the position after it. ``inner``: the struct is a ColumnChunk (a field of
    :data:`_CC_REFUSED` refused), and these fields of its ``meta_data`` are moved too."""
    copied = pos
    last = 0
    while True:
        head = data[pos]
        if head == STOP:
            out += data[copied : pos + 1]
            return pos + 1
        fid, typ, at = _field(data, pos, last)
        last = fid
        if fid in moved:
            value, pos = _moved_int(data, at, typ, by)
            out += data[copied:at]
            out += value
            copied = pos
        elif inner is not None and fid == _CC_META and typ == STRUCT:
            out += data[copied:at]
            pos = _move_fields(data, at, by, out, inner)
            copied = pos
        elif inner is not None and fid in _CC_REFUSED:
            raise FooterError("a column chunk in another file, or encrypted, cannot be moved")
        else:
            pos = at if typ in (TRUE, FALSE) else skip(data, at, typ)


def _move_row_group(data: bytes, pos: int, by: int, ordinal: int, out: bytearray) -> int:
    """Append the RowGroup at ``data[pos:]`` to ``out`` as :func:`_moved_row_group` gives it:
    its values copied but for the offsets and the ordinal, each field's header written again
    (the ordinal may be new: the delta of the field after it changes). The position after it;
    _OutOfOrder when its fields are not in id order."""
    last = written = 0  # the last id read, and written
    ordinal_done = False
    while data[pos] != STOP:
        fid, typ, at = _field(data, pos, last)
        if fid <= last:
            raise _OutOfOrder
        last = fid
        if not ordinal_done and fid >= _RG_ORDINAL:
            out += field_header(_RG_ORDINAL, written, I16)
            out += zigzag_bytes(ordinal, 16)
            written, ordinal_done = _RG_ORDINAL, True
            if fid == _RG_ORDINAL:  # the one read is replaced
                pos = at if typ in (TRUE, FALSE) else skip(data, at, typ)
                continue
        if fid == _RG_COLUMNS and typ == LIST:
            size, elem, pos = _list_head(data, at)
            if elem != STRUCT and size:
                raise FooterError(f"a row group's columns are a list of wire type {elem}")
            out += field_header(fid, written, LIST)
            out += list_header(size, STRUCT)
            for _ in range(size):
                pos = _move_fields(data, pos, by, out, _CC_MOVED, _CMD_MOVED)
        elif fid == _RG_FILE_OFFSET:
            out += field_header(fid, written, I64)  # an i64 whatever it was read as
            value, pos = _moved_int(data, at, typ, by)
            out += value
        else:
            pos = at if typ in (TRUE, FALSE) else skip(data, at, typ)
            out += field_header(fid, written, typ)
            out += data[at:pos]
        written = fid
    if not ordinal_done:
        out += field_header(_RG_ORDINAL, written, I16)
        out += zigzag_bytes(ordinal, 16)
    out.append(STOP)
    return pos + 1


def _list_head(data: bytes, pos: int) -> tuple[int, int, int]:
    """A list's size and element type, and where its first element starts."""
    head = data[pos]
    size, elem, pos = head >> 4, head & 0x0F, pos + 1
    if size == 15:
        size, pos = read_varint(data, pos)
    if size > len(data) - pos:
        raise ThriftError(f"a list of {size} elements at byte {pos}, past the end")
    return size, elem, pos


class FooterJoin:
    """The footer joining pieces, made as the pieces' footers are read: each footer is walked
    once (:meth:`add`), its row groups copied right away with their offsets moved and their
    ordinals numbered on, and only those bytes and the first piece's schema are kept; the
    footer is written around them at the end (:meth:`footer`). What :func:`joined_footer`
    gives, for a footer of any number of pieces at the cost of their row groups' bytes."""

    def __init__(self) -> None:
        self._groups: list[bytes] = []  # each piece's row groups, encoded, moved
        self._schema: bytes | None = None  # the first piece's (its encoded schema list)
        self._first_at = 0
        self._other: int | None = None  # the first piece of another schema than the first's
        self.row_groups = 0
        """Row groups added so far."""
        self.rows = 0
        """Rows added so far (the pieces' ``num_rows`` summed)."""

    def add(self, footer: bytes | memoryview, offset: int) -> tuple[int, dict[bytes, bytes]]:
        """Add the piece starting at byte ``offset`` of the file, whose ``FileMetaData`` is
        ``footer`` (its Thrift bytes, :func:`footer_bytes`); return its rows and key-value
        metadata. FooterError for a footer that cannot be read, an encrypted piece or past
        32768 row groups (a piece of another schema is refused by :meth:`footer`)."""
        data = bytes(footer)
        try:
            return self._add(data, offset)
        except (ThriftError, IndexError) as exc:
            why = exc if isinstance(exc, ThriftError) else "it ends early"
            raise FooterError(
                f"the footer of the piece at byte {offset} cannot be read: {why}"
            ) from None

    def _add(self, data: bytes, offset: int) -> tuple[int, dict[bytes, bytes]]:
        rows: int | None = None
        metadata: dict[bytes, bytes] = {}
        groups = bytearray()
        count = 0
        schema: bytes | None = None
        pos = last = 0
        while data[pos] != STOP:
            fid, typ, at = _field(data, pos, last)
            last = fid
            if fid == _FM_ENCRYPTION:
                raise FooterError("an encrypted piece cannot be joined")
            if fid == _FM_ROW_GROUPS and typ == LIST:
                size, _, pos = _list_head(data, at)
                for _ in range(size):
                    if self.row_groups + count >= 1 << 15:
                        raise FooterError("more than 32767 row groups")
                    pos = self._move(data, pos, offset, self.row_groups + count, groups)
                    count += 1
                continue
            pos = at if typ in (TRUE, FALSE) else skip(data, at, typ)
            if fid == _FM_SCHEMA:
                schema = data[at:pos]
            elif fid == _FM_NUM_ROWS:
                n, _ = read_varint(data, at)
                rows = (n >> 1) ^ -(n & 1)
            elif fid == _FM_KV:
                metadata = footer_metadata({fid: Field(typ, read_value(data, at, typ)[0])})
        if pos + 1 != len(data):
            raise FooterError(f"its footer has {len(data) - pos - 1} bytes after the struct")
        if rows is None or schema is None:
            raise FooterError(f"the piece at byte {offset} has no row count or no schema")
        if self._schema is None:
            self._schema, self._first_at = schema, offset
        elif (
            self._other is None
            and schema != self._schema
            and _decoded(schema) != _decoded(self._schema)  # not the same bytes: by value
        ):
            self._other = offset
        self._groups.append(bytes(groups))
        self.row_groups += count
        self.rows += rows
        return rows, metadata

    @staticmethod
    def _move(data: bytes, pos: int, by: int, ordinal: int, out: bytearray) -> int:
        mark = len(out)
        try:
            return _move_row_group(data, pos, by, ordinal, out)
        except _OutOfOrder:
            del out[mark:]
        rg, end = read_struct(data, pos)
        out += write_struct(_moved_row_group(rg, by, ordinal))
        return end

    def footer(self, whole: Struct) -> bytes:
        """The footer (with its length and ``PAR1``) of the pieces added, in the order added:
        ``whole``'s schema, key-value metadata, writer and column orders
        (:func:`footer_of_schema`), the rows summed, the row groups moved. FooterError when the
        pieces have another schema than ``whole``."""
        schema = whole[_FM_SCHEMA]
        if self._schema is not None:
            mine = write_value(schema.type, schema.value)
            at = self._other
            if self._schema != mine and _decoded(self._schema) != schema.value:
                at = self._first_at
            if at is not None:
                raise FooterError(f"the piece at byte {at} has another schema than the file")
        head: Struct = {fid: whole[fid] for fid in (_FM_VERSION, _FM_SCHEMA)}
        head[_FM_NUM_ROWS] = Field(I64, self.rows)
        rest = {
            fid: whole[fid] for fid in (_FM_KV, _FM_CREATED_BY, _FM_COLUMN_ORDERS) if fid in whole
        }
        parts = [
            write_fields(head),
            field_header(_FM_ROW_GROUPS, _FM_NUM_ROWS, LIST),
            list_header(self.row_groups, STRUCT),
            *self._groups,
            write_fields(rest, _FM_ROW_GROUPS),
            bytes((STOP,)),
        ]
        parts.append(_TAIL.pack(sum(map(len, parts)), MAGIC))
        return b"".join(parts)  # one copy of the row groups' bytes, not two


def _decoded(schema: bytes) -> object:
    """An encoded schema list (FileMetaData's field 2) as its values."""
    return read_value(schema, 0, LIST)[0]


def joined_footer(pieces: Sequence[tuple[int, Struct | bytes]], whole: Struct) -> bytes:
    """The footer (with its length and ``PAR1``) that makes pieces appended into one file one
    Parquet file: ``pieces`` are (offset of the piece in the file, its footer as a struct or
    its Thrift bytes); ``whole`` is the footer whose schema, key-value metadata, writer and
    column orders the file gets (:func:`footer_of_schema`). Every piece must have ``whole``'s
    schema; its row groups are kept in order with every offset moved by the piece's start and
    their ordinals renumbered, and the rows are summed. FooterError for a piece of another
    schema or one encrypted. :class:`FooterJoin` does it one piece at a time."""
    join = FooterJoin()
    for offset, meta in pieces:
        join.add(meta if isinstance(meta, bytes) else write_struct(meta), offset)
    return join.footer(whole)
