"""The Thrift compact protocol (``formats.thrift_compact``): bytes by hand, Parquet footers
pyarrow wrote read and written back byte for byte, torn input an error."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats import thrift_compact
from stroboscope.formats.parquet_footer import footer_bytes


def _file(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_page_index=True)
    return sink.getvalue()


TABLES = {
    "ints": pa.table({"a": pa.array(range(50), pa.int64())}),
    "floats, nulls": pa.table({"x": pa.array([1.5, None, float("nan")] * 9)}),
    "strings, dictionary": pa.table({"s": pa.array(["a", "b"] * 9).dictionary_encode()}),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_footers_read_and_written_back_are_the_same_bytes(name: str) -> None:
    raw = bytes(footer_bytes(_file(TABLES[name])))
    fields, end = thrift_compact.read_struct(raw)
    assert end == len(raw)
    assert thrift_compact.write_struct(fields) == raw


@pytest.mark.parametrize(
    ("fields", "raw"),
    [
        # field 1 i32 = -1 (zigzag 1), field 2 true, field 20 i64 = 150 (long id), stop
        (
            {
                1: thrift_compact.Field(thrift_compact.I32, -1),
                2: thrift_compact.Field(thrift_compact.BOOL, True),
                20: thrift_compact.Field(thrift_compact.I64, 150),
            },
            bytes([0x15, 0x01, 0x11, 0x06, 0x28, 0xAC, 0x02, 0x00]),
        ),
        # a list of 16 i32 (size in a varint after 0xF5), then binary b"ab"
        (
            {
                1: thrift_compact.Field(
                    thrift_compact.LIST, thrift_compact.Seq(thrift_compact.I32, [0] * 16)
                ),
                2: thrift_compact.Field(thrift_compact.BINARY, b"ab"),
            },
            bytes([0x19, 0xF5, 0x10, *[0] * 16, 0x18, 0x02, 0x61, 0x62, 0x00]),
        ),
    ],
)
def test_compact_protocol_bytes_by_hand(fields: thrift_compact.Struct, raw: bytes) -> None:
    assert thrift_compact.write_struct(fields) == raw
    assert thrift_compact.read_struct(raw) == (fields, len(raw))


@pytest.mark.parametrize("cut", [0, 1, 5, 17, -1])
def test_a_torn_footer_is_an_error_not_a_crash(cut: int) -> None:
    raw = bytes(footer_bytes(_file(TABLES["ints"])))
    with pytest.raises(thrift_compact.ThriftError):
        thrift_compact.read_struct(raw[: cut % len(raw)])


@pytest.mark.parametrize("name", sorted(TABLES))
def test_skip_walks_every_value_to_where_the_reader_ends(name: str) -> None:
    """Each field of a footer (and each element of its lists) skipped ends where reading it
    ends; the whole struct skipped ends at its end."""
    raw = bytes(footer_bytes(_file(TABLES[name])))
    assert thrift_compact.skip(raw, 0, thrift_compact.STRUCT) == len(raw)
    fields, _ = thrift_compact.read_struct(raw)
    pos = last = 0
    for fid, f in fields.items():
        head = raw[pos]
        at = pos + 1 if head >> 4 else thrift_compact.read_varint(raw, pos + 1)[1]
        typ = f.type if f.type != thrift_compact.BOOL else 2 - bool(f.value)  # TRUE 1, FALSE 2
        assert raw[pos:at] == thrift_compact.field_header(fid, last, typ)
        end = thrift_compact.skip(raw, at, f.type) if f.type != thrift_compact.BOOL else at
        value, read_end = thrift_compact.read_value(raw, at, f.type)
        assert (value, end) == (f.value, read_end)
        assert thrift_compact.write_value(f.type, value) == raw[at:end]
        pos, last = end, fid


@pytest.mark.parametrize("n", [0, 1, 14, 15, 16, 200, 70_000])
def test_a_list_written_header_then_element_by_element_is_the_list(n: int) -> None:
    """The list header for ``n`` elements (short form below 15, else a varint size) followed by
    each struct's own bytes is the list the struct writer writes whole."""
    elems = [{1: thrift_compact.Field(thrift_compact.I64, k * 1000 - 7)} for k in range(n)]
    whole = thrift_compact.write_struct(
        {
            4: thrift_compact.Field(
                thrift_compact.LIST, thrift_compact.Seq(thrift_compact.STRUCT, elems)
            )
        }
    )
    parts = [thrift_compact.field_header(4, 0, thrift_compact.LIST)]
    parts.append(thrift_compact.list_header(n, thrift_compact.STRUCT))
    parts += [thrift_compact.write_struct(e) for e in elems]
    assert b"".join(parts) + b"\x00" == whole


def test_a_struct_written_in_parts_is_the_struct() -> None:
    """Fields written after others (``last``: the id before them) and ids far apart (a header
    of its own for the id) give the struct written whole."""
    f = thrift_compact.Field
    fields = {
        1: f(thrift_compact.I32, 3),
        2: f(thrift_compact.BINARY, b"x"),
        40: f(thrift_compact.I64, -(1 << 40)),
        41: f(thrift_compact.BOOL, False),
    }
    whole = thrift_compact.write_struct(fields)
    head = thrift_compact.write_fields({k: fields[k] for k in (1, 2)})
    tail = thrift_compact.write_fields({k: fields[k] for k in (40, 41)}, last=2)
    assert head + tail + b"\x00" == whole
    assert thrift_compact.zigzag_bytes(-(1 << 40), 64) in whole
    with pytest.raises(thrift_compact.ThriftError, match="does not fit"):
        thrift_compact.zigzag_bytes(1 << 15, 16)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_skip_of_torn_bytes_is_an_error(name: str) -> None:
    raw = bytes(footer_bytes(_file(TABLES[name])))
    for cut in (1, len(raw) // 3, len(raw) - 1):
        with pytest.raises(thrift_compact.ThriftError):
            thrift_compact.skip(raw[:cut], 0, thrift_compact.STRUCT)
