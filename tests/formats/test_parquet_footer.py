"""Parquet files appended one after another and joined by one footer
(``formats.parquet_footer``) read back with pyarrow (and DuckDB where installed) as the tables
concatenated, for several schemas."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats import thrift_compact as tc
from stroboscope.formats.parquet_footer import (
    FooterError,
    FooterJoin,
    footer_metadata,
    footer_of_schema,
    joined_footer,
    read_footer,
)
from stroboscope.formats.thrift_compact import Field, Struct


def _file(table: pa.Table, **kw: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", **kw)
    return sink.getvalue()


def _ints(k: int) -> pa.Table:
    return pa.table({"a": pa.array(range(k * 100, k * 100 + 50), pa.int64())})


def _floats(k: int) -> pa.Table:
    x = np.linspace(k, k + 1, 40)
    x[::7] = np.nan
    return pa.table({"x": x, "y": pa.array([None if i % 3 else float(i) for i in range(40)])})


def _strings(k: int) -> pa.Table:
    names = pa.array([f"s{(i + k) % 4}" for i in range(30)])
    return pa.table({"name": names, "dict": names.dictionary_encode(), "n": range(30)})


def _nulls(k: int) -> pa.Table:
    return pa.table(
        {
            "n": pa.array([None] * 20, pa.int64()),
            "m": pa.array([i if i % 2 else None for i in range(20)], pa.float64()),
            "t": pa.array(np.arange(20) + k * 1000, pa.timestamp("ns", "UTC")),
        }
    )


SCHEMAS: dict[str, Callable[[int], pa.Table]] = {
    "ints": _ints,
    "floats with NaN and nulls": _floats,
    "strings and dictionary": _strings,
    "nulls and timestamps": _nulls,
}


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (``Table.equals`` holds NaN unequal to itself)."""

    def cells(t: pa.Table) -> dict[str, list[object]]:
        return {
            k: ["nan" if isinstance(v, float) and v != v else v for v in col]
            for k, col in t.to_pydict().items()
        }

    return a.schema.equals(b.schema, check_metadata=True) and cells(a) == cells(b)


def _joined(tables: list[pa.Table], meta: dict[bytes, bytes], **kw: object) -> bytes:
    """The tables written as pieces one after another, then the joined footer."""
    out = bytearray()
    pieces = []
    for t in tables:
        raw = _file(t, **kw)
        pieces.append((len(out), read_footer(raw)))
        out += raw
    whole = footer_of_schema(tables[0].schema.with_metadata(meta))
    return bytes(out) + joined_footer(pieces, whole)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_joined_pieces_read_as_the_tables_concatenated(name: str) -> None:
    tables = [SCHEMAS[name](k) for k in range(4)]
    meta = {b"stroboscope.rows_lost": b"3", b"other": b"x"}
    data = _joined(tables, meta)
    got = pq.read_table(pa.BufferReader(data))
    want = pa.concat_tables(tables)
    assert _same(got, want.replace_schema_metadata(meta))
    assert got.schema.metadata == meta  # the final key-value metadata, nothing of the pieces'
    md = pq.read_metadata(pa.BufferReader(data))
    assert md.num_rows == want.num_rows and md.num_row_groups == 4
    # Statistics kept, per row group, for the rows it holds.
    for k in range(4):
        for c in range(md.num_columns):
            st = md.row_group(k).column(c).statistics
            piece = pq.read_metadata(pa.BufferReader(_file(tables[k]))).row_group(0).column(c)
            assert (st is None) == (piece.statistics is None)
            if st is not None and st.has_min_max:
                assert (st.min, st.max, st.null_count) == (
                    piece.statistics.min,
                    piece.statistics.max,
                    piece.statistics.null_count,
                )


def test_many_row_groups_and_a_page_index_are_moved() -> None:
    """Pieces of several row groups each, with the page index (column and offset index) and
    dictionary pages: every offset of every chunk is moved, the ordinals run 0..n-1."""
    tables = [_strings(k) for k in range(3)]
    data = _joined(tables, {}, row_group_size=7, write_page_index=True)
    pf = pq.ParquetFile(pa.BufferReader(data))
    assert pf.metadata.num_row_groups == 3 * 5
    assert pf.read().equals(pa.concat_tables(tables))
    for k in range(pf.metadata.num_row_groups):  # each row group alone, by its offsets
        rg = pf.read_row_group(k)
        assert rg.equals(pa.concat_tables(tables).slice(k // 5 * 30 + k % 5 * 7, rg.num_rows))
    meta = read_footer(data)
    ordinals = [rg[7].value for rg in meta[4].value.values]
    assert ordinals == list(range(15))


def test_duckdb_reads_the_joined_file(tmp_path: object) -> None:
    duckdb = pytest.importorskip("duckdb")
    from pathlib import Path

    path = Path(str(tmp_path)) / "joined.parquet"
    tables = [_floats(k) for k in range(3)]
    path.write_bytes(_joined(tables, {}))
    (got,) = duckdb.sql(f"select count(*), sum(y) from read_parquet('{path}')").fetchall()
    want = pa.concat_tables(tables)
    assert got == (want.num_rows, pa.compute.sum(want.column("y")).as_py())


def test_a_piece_of_another_schema_is_refused() -> None:
    a, b = _file(_ints(0)), _file(_floats(0))
    whole = footer_of_schema(_ints(0).schema)
    with pytest.raises(FooterError, match="another schema"):
        joined_footer([(0, read_footer(a)), (len(a), read_footer(b))], whole)


# --- the streaming join against the struct path it replaced -------------------------------


def _reference_join(pieces: list[tuple[int, Struct]], whole: Struct) -> bytes:
    """The joined footer as the joiner made it before it streamed: every piece's footer
    parsed whole, its row groups rebuilt as structs (offsets moved, ordinals renumbered,
    fields sorted), the footer written from the tree."""

    def shift(fields: Struct, ids: tuple[int, ...], by: int) -> None:
        for fid in ids:
            if fid in fields:
                fields[fid] = Field(fields[fid].type, fields[fid].value + by)

    groups: list[Struct] = []
    rows = 0
    for offset, meta in pieces:
        assert meta[2] == whole[2]
        for rg in meta[4].value.values:
            out = dict(rg)
            chunks = []
            for cc in rg[1].value.values:
                moved = dict(cc)
                shift(moved, (2, 4, 6), offset)
                if 3 in cc:
                    cmd = dict(cc[3].value)
                    shift(cmd, (9, 10, 11, 14), offset)
                    moved[3] = Field(tc.STRUCT, cmd)
                chunks.append(moved)
            out[1] = Field(tc.LIST, tc.Seq(tc.STRUCT, chunks))
            if 5 in rg:
                out[5] = Field(tc.I64, rg[5].value + offset)
            out[7] = Field(tc.I16, len(groups))
            groups.append(dict(sorted(out.items())))
        rows += meta[3].value
    out_meta: Struct = {1: whole[1], 2: whole[2], 3: Field(tc.I64, rows)}
    out_meta[4] = Field(tc.LIST, tc.Seq(tc.STRUCT, groups))
    out_meta.update({fid: whole[fid] for fid in (5, 6, 7) if fid in whole})
    raw = tc.write_struct(out_meta)
    return raw + struct.pack("<I", len(raw)) + b"PAR1"


def _strip_ordinals(meta: Struct, every: int) -> Struct:
    """``meta`` with the ordinal of every ``every``-th row group taken out (a writer that
    does not write it), and the row group fields of the others written in reverse order."""
    groups = []
    for k, rg in enumerate(meta[4].value.values):
        if k % every == 0:
            groups.append({fid: f for fid, f in rg.items() if fid != 7})
        elif k % every == 1:
            groups.append(dict(reversed(rg.items())))  # out of order: the struct path
        else:
            groups.append(rg)
    return {**meta, 4: Field(tc.LIST, tc.Seq(tc.STRUCT, groups))}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_streaming_join_gives_the_bytes_the_struct_path_gave(name: str) -> None:
    """Many pieces at offsets whose varints grow by a byte and more (an offset moved past
    2**7, 2**14, 2**21, 2**35 bytes takes more varint bytes), several row groups each, the page
    index, row groups without an ordinal or with their fields out of order: the joined footer
    is, byte for byte, the one the struct path gave, whether given structs or bytes."""
    meta = {b"stroboscope.rows_lost": b"0"}
    tables = [SCHEMAS[name](k) for k in range(12)]
    offsets = [0, 4, 100, 130, 16_000, 16_390, 2_000_000, 2_100_000, 1 << 35, (1 << 40) + 3]
    offsets += [1 << 50, (1 << 62) - (1 << 20)]
    pieces = []
    for k, (t, at) in enumerate(zip(tables, offsets)):
        kw: dict[str, object] = {"row_group_size": 9} if k % 3 else {"write_page_index": True}
        footer = read_footer(_file(t, **kw))
        pieces.append((at, _strip_ordinals(footer, 3) if k % 4 == 1 else footer))
    whole = footer_of_schema(tables[0].schema.with_metadata(meta))
    want = _reference_join(pieces, whole)
    assert joined_footer(pieces, whole) == want
    raw = [(at, tc.write_struct(m)) for at, m in pieces]
    assert joined_footer(raw, whole) == want
    join = FooterJoin()
    for (at, m), (_, b) in zip(pieces, raw):
        got_rows, got_meta = join.add(b, at)
        assert got_rows == m[3].value
        assert got_meta == footer_metadata(m)
    assert join.footer(whole) == want
    assert join.rows == sum(t.num_rows for t in tables)
    assert join.row_groups == sum(len(m[4].value.values) for _, m in pieces)


def test_a_join_keeps_only_the_moved_row_groups() -> None:
    """What a join holds between pieces is their moved row groups' bytes (the footer written
    at the end is about their sum), not their footers parsed: 400 pieces of a 12-column file
    keep less than twice the bytes of the footer they make (parsed into structs they held
    ~60x that)."""
    import tracemalloc

    cols = {f"c{k}": pa.array(np.linspace(k, k + 1, 50)) for k in range(12)}
    raw = tc.write_struct(read_footer(_file(pa.table(cols))))
    whole = footer_of_schema(pa.table(cols).schema)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        join = FooterJoin()
        for k in range(400):
            join.add(raw, 4 + k * 10_000)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    footer = join.footer(whole)
    assert join.row_groups == 400
    assert len(footer) > 400 * 12 * 50  # each row group's 12 chunks: statistics, offsets...
    assert held < 2 * len(footer), (held, len(footer))


def _with(meta: Struct, fid: int, field: Field) -> bytes:
    return tc.write_struct({**meta, fid: field})


def test_a_footer_the_join_cannot_move_is_refused() -> None:
    """An encrypted piece, a column chunk in another file, a torn footer, bytes after the
    struct, a piece of another schema (the second one, said at the end), more than 32768 row
    groups: FooterError naming why."""
    a = read_footer(_file(_ints(0)))
    whole = footer_of_schema(_ints(0).schema)
    raw = tc.write_struct(a)
    with pytest.raises(FooterError, match="encrypted piece"):
        FooterJoin().add(_with(a, 8, Field(tc.STRUCT, {})), 0)
    chunk = a[4].value.values[0][1].value.values[0]
    chunk[1] = Field(tc.BINARY, b"elsewhere.parquet")
    with pytest.raises(FooterError, match="another file"):
        FooterJoin().add(tc.write_struct(dict(sorted(a.items()))), 0)
    del chunk[1]
    with pytest.raises(FooterError, match="cannot be read"):
        FooterJoin().add(raw[: len(raw) // 2], 0)
    with pytest.raises(FooterError, match="bytes after the struct"):
        FooterJoin().add(raw + b"\x00", 0)
    join = FooterJoin()
    join.add(raw, 0)
    join.add(tc.write_struct(read_footer(_file(_floats(0)))), 1000)  # accepted until the end
    join.add(raw, 2000)
    with pytest.raises(FooterError, match="piece at byte 1000 has another schema"):
        join.footer(whole)
    many = FooterJoin()
    for k in range(1 << 15):
        many.add(raw, k)
    with pytest.raises(FooterError, match="more than 32767 row groups"):
        many.add(raw, 1 << 15)
    assert len(many.footer(whole)) > 1 << 15
