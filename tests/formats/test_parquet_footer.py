"""Parquet files appended one after another and joined by one footer
(``formats.parquet_footer``) read back with pyarrow (and DuckDB where installed) as the tables
concatenated, for several schemas."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats.parquet_footer import (
    FooterError,
    footer_of_schema,
    joined_footer,
    read_footer,
)


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
