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
