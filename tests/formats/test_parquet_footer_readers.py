"""The file a recording's end makes by joining its pieces (``formats.pieces`` appended, one
footer from ``formats.parquet_footer``) read back by every reader people use: pyarrow, DuckDB,
polars, pandas, and fastparquet where it installs. Each reader's rows, row groups, statistics
(min, max, null count) and key-value metadata are compared with what is computed here from the
original data, and a filter that each reader prunes by the statistics counts the rows numpy
counts (a wrong minimum or maximum drops the row groups it misdescribes).

The file is made with the steps of ``recording._output.Clean.join``: pieces of the recording's
column types (``timestamp[ns, UTC]``, ``int64``, ``double``, with the units and kinds a stored
schema keeps) appended with their index records, the footers read back from their tails, the
joined footer (of the output's schema and metadata) appended, the file renamed to the output.
One test makes it with ``stroboscope record`` itself. The scope intervals beside a recording
are written whole (``formats.writers.write_parquet``), never joined: not this file's business.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.formats.parquet_footer import (
    FooterJoin,
    footer_bytes_of,
    footer_of_schema,
)
from stroboscope.formats.pieces import (
    Piece,
    append_piece,
    append_tail,
    encode_piece,
    pieces_path,
    read_index,
    read_piece_range,
)
from stroboscope.formats.segments import FIRST_ROW_KEY, stored_schema

UID = os.geteuid()
T0_NS = 1_796_000_000 * 10**9
MONO0_NS = 10**13
META = {
    b"stroboscope.rows_lost": b"7",
    b"stroboscope.provenance": json.dumps({"host": "h", "rows": 1}).encode(),
}
HAS_FASTPARQUET = importlib.util.find_spec("fastparquet") is not None
FASTPARQUET = pytest.mark.skipif(not HAS_FASTPARQUET, reason="fastparquet is not installed")

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


@dataclass
class Column:
    """One column of the original data: its values (meaningless where not valid) and
    validity, a row each."""

    kind: str  # "time", "int" or "float"
    values: Ints | Floats
    valid: Mask


@dataclass
class Made:
    """A joined file and what it was made of."""

    path: Path
    columns: dict[str, Column]
    groups: list[tuple[int, int]]  # (first row, rows) of each row group, in order

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.groups)


# The recording's column set in small: the clock, rates and gauges with the nulls a source
# that reads slower than the tick leaves, a source that failed for a while (all null in one
# piece), one that never read (all null), and a steady count.
FIELDS: list[tuple[str, str, bytes, bytes]] = [
    ("time", "time", b"ns", b"gauge"),
    ("mono_ns", "int", b"ns", b"gauge"),
    ("cpu.util_pct", "float", b"%", b"rate"),
    ("mem.available_bytes", "int", b"bytes", b"gauge"),
    ("net.recv_bytes", "int", b"bytes", b"counter"),
    ("net.recv_bytes_per_s", "float", b"bytes/s", b"rate"),
    ("gpu.0.power_w", "float", b"W", b"gauge"),
    ("proc.threads", "int", b"count", b"gauge"),
]
TYPES = {"time": pa.timestamp("ns", "UTC"), "int": pa.int64(), "float": pa.float64()}


def _schema() -> pa.Schema:
    fields = [
        pa.field(name, TYPES[kind], metadata={b"unit": unit, b"kind": k, b"help": b"dropped"})
        for name, kind, unit, k in FIELDS
    ]
    return stored_schema(pa.schema(fields))  # what a piece of a recording is written as


def _data(rows: int, failed: tuple[int, int], seed: int = 33) -> dict[str, Column]:
    """The original data: ``rows`` rows at 1 ms, ``net.recv_bytes_per_s`` null in the rows
    ``failed`` (a source that failed), ``gpu.0.power_w`` null in every row."""
    rng = np.random.default_rng(seed)
    at = np.arange(rows, dtype=np.int64)
    mono = MONO0_NS + at * 1_000_000 + rng.integers(0, 40_000, rows)
    every = np.ones(rows, bool)
    cpu_valid = at % 3 == 0
    net_valid = at % 5 == 0
    rate_valid = net_valid.copy()
    rate_valid[failed[0] : failed[1]] = False
    return {
        "time": Column("time", mono - MONO0_NS + T0_NS, every),
        "mono_ns": Column("int", mono, every),
        "cpu.util_pct": Column("float", rng.uniform(0, 100, rows), cpu_valid),
        "mem.available_bytes": Column(
            "int", (24 << 30) + 4096 * rng.integers(-1000, 1000, rows), at % 2 == 0
        ),
        "net.recv_bytes": Column("int", np.cumsum(rng.integers(0, 1 << 16, rows)), net_valid),
        "net.recv_bytes_per_s": Column("float", rng.exponential(1e6, rows), rate_valid),
        "gpu.0.power_w": Column("float", np.zeros(rows), np.zeros(rows, bool)),
        "proc.threads": Column("int", np.full(rows, 4, np.int64), every),
    }


def _table(columns: dict[str, Column], first: int, n: int) -> pa.Table:
    arrays = []
    for name, kind, _, _ in FIELDS:
        c = columns[name]
        values, valid = c.values[first : first + n], c.valid[first : first + n]
        arrays.append(pa.array(values, TYPES[kind], mask=~valid))
    return pa.Table.from_arrays(arrays, schema=_schema())


def _join(
    tmp: Path, columns: dict[str, Column], pieces: list[int], groups_of: dict[int, int]
) -> Made:
    """Pieces of ``pieces`` rows each appended (piece k in row groups of ``groups_of[k]``
    rows, else one row group as ``encode_piece`` writes it), joined, renamed to the output."""
    spool = tmp / "run.spool"
    first = 0
    groups: list[tuple[int, int]] = []
    for k, n in enumerate(pieces):
        table = _table(columns, first, n)
        table = table.replace_schema_metadata({FIRST_ROW_KEY: str(first).encode()})
        if k in groups_of:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd", row_group_size=groups_of[k])
            data = sink.getvalue().to_pybytes()
            size = groups_of[k]
        else:
            data, size = encode_piece(table), n
        append_piece(data, pieces_path(spool), first, n)
        groups += [(first + at, min(size, n - at)) for at in range(0, n, size)]
        first += n
    listed, damage = read_index(spool, UID)
    assert damage is None and [p.rows for p in listed] == pieces
    join = FooterJoin()
    for p in listed:  # each piece's footer from its tail, as the end reads and joins them

        def read(offset: int, n: int, p: Piece = p) -> bytes:
            return read_piece_range(p, UID, offset, n)

        rows, meta = join.add(footer_bytes_of(read, p.length), p.offset)
        assert (rows, meta[FIRST_ROW_KEY]) == (p.rows, str(p.first_row).encode())
    whole = footer_of_schema(_schema().with_metadata(META))
    append_tail(pieces_path(spool), join.footer(whole))
    out = tmp / "run.parquet"
    os.replace(pieces_path(spool), out)
    return Made(out, columns, groups)


@pytest.fixture(params=["pieces of one row group", "a piece of several row groups"])
def made(request: pytest.FixtureRequest, tmp_path: Path) -> Made:
    """Four pieces of different sizes (the last one the ring's rest), one of a single row;
    the rate source failed from the end of the first piece to the start of the last (its
    column all null in the second and third)."""
    pieces = [3000, 1, 1700, 1234]
    columns = _data(sum(pieces), failed=(2500, 4800))
    several = {2: 400} if request.param == "a piece of several row groups" else {}
    return _join(tmp_path, columns, pieces, several)


# --- what is expected, from the original data --------------------------------------------


@dataclass(frozen=True)
class Stat:
    """A column chunk's statistics: null count, and min and max (None when no cell is
    valid), as the column's stored values (ns for time)."""

    nulls: int
    min: float | None
    max: float | None


def _expected_stats(made: Made) -> list[dict[str, Stat]]:
    out = []
    for first, n in made.groups:
        group = {}
        for name, c in made.columns.items():
            valid = c.valid[first : first + n]
            vals = c.values[first : first + n][valid]
            if c.kind == "float":  # writers leave NaN out of min and max (the format says so)
                vals = vals[~np.isnan(vals)]
            lo = None if len(vals) == 0 else vals.min().item()
            hi = None if len(vals) == 0 else vals.max().item()
            group[name] = Stat(int((~valid).sum()), lo, hi)
        out.append(group)
    return out


def _check_cells(made: Made, got: dict[str, tuple[npt.NDArray[Any], Mask]], who: str) -> None:
    """Each column's validity and valid values as the original's."""
    assert sorted(got) == sorted(made.columns), who
    for name, c in made.columns.items():
        values, valid = got[name]
        assert len(valid) == made.rows, (who, name)
        assert np.array_equal(valid, c.valid), (who, name, "nulls")
        assert np.array_equal(np.asarray(values)[valid], c.values[c.valid]), (who, name)


def _check_stats(made: Made, got: list[dict[str, Stat]], who: str) -> None:
    want = _expected_stats(made)
    assert len(got) == len(want), (who, "row groups")
    for k, (g, w) in enumerate(zip(got, want)):
        for name in made.columns:
            a, b = g[name], w[name]
            assert a.nulls == b.nulls, (who, k, name, "null count", a, b)
            if b.min is None:  # no value: no min/max, or (fastparquet, DuckDB) an empty one
                assert a.min is None and a.max is None, (who, k, name, a)
                continue
            assert a.min is not None and a.max is not None and b.max is not None, (who, k, name)
            assert math.isclose(a.min, b.min, rel_tol=1e-15), (who, k, name, "min", a, b)
            assert math.isclose(a.max, b.max, rel_tol=1e-15), (who, k, name, "max", a, b)


# A window of mono_ns across row groups, and a threshold of cpu.util_pct: the rows each
# reader keeps after pruning row groups by their statistics.
def _window(made: Made) -> tuple[int, int]:
    mono = made.columns["mono_ns"].values
    return int(mono[3100]), int(mono[4500])  # inside the third piece: the others pruned


def _want_count(made: Made) -> tuple[int, int]:
    lo, hi = _window(made)
    mono = made.columns["mono_ns"].values
    cpu = made.columns["cpu.util_pct"]
    in_window = int(((mono >= lo) & (mono <= hi)).sum())
    return in_window, int((cpu.valid & (cpu.values > 99.0)).sum())


# --- the statistics as each reader gives them ---------------------------------------------


def _pyarrow_stats(md: pq.FileMetaData) -> list[dict[str, Stat]]:
    """Each row group's statistics as pyarrow reads the footer (stored values: ``min_raw``)."""
    stats = []
    for k in range(md.num_row_groups):
        group = {}
        for j in range(md.num_columns):
            chunk = md.row_group(k).column(j)
            st = chunk.statistics
            assert st is not None and st.has_null_count, (k, chunk.path_in_schema)
            lo, hi = (st.min_raw, st.max_raw) if st.has_min_max else (None, None)
            group[chunk.path_in_schema] = Stat(st.null_count, lo, hi)
        stats.append(group)
    return stats


def _duckdb_stats(con: Any, path: str, kinds: dict[str, str]) -> tuple[list[int], list[Any]]:
    """Each row group's rows and statistics as DuckDB reads the footer (``parquet_metadata``:
    values as text, timestamps as ISO text)."""
    import pandas as pd

    rows = con.sql(
        "SELECT row_group_id, row_group_num_rows, path_in_schema, stats_null_count, "
        f"stats_min_value, stats_max_value FROM parquet_metadata('{path}') "
        "ORDER BY row_group_id, column_id"
    ).fetchall()

    def value(name: str, text: str | None) -> float | None:
        if text is None:
            return None
        if kinds[name] == "time":
            return float(pd.Timestamp(text).value)
        return float(text) if kinds[name] == "float" else int(text)

    stats: list[dict[str, Stat]] = []
    sizes: list[int] = []
    for rg, n, name, nulls, lo, hi in rows:
        if rg == len(stats):
            stats.append({})
            sizes.append(n)
        stats[rg][name] = Stat(nulls, value(name, lo), value(name, hi))
    return sizes, stats


def _fastparquet_value(raw: bytes | None, kind: str) -> float | None:
    if raw is None:
        return None
    return float(struct.unpack("<d" if kind == "float" else "<q", raw)[0])


def _fastparquet_stats(pf: Any, kinds: dict[str, str]) -> tuple[list[int], list[Any]]:
    """Each row group's rows and statistics as fastparquet's own Thrift reader gives the
    footer (values as stored, decoded here: little-endian int64 or double)."""
    stats: list[dict[str, Stat]] = []
    for rg in pf.row_groups:
        group = {}
        for chunk in rg.columns:
            name = ".".join(chunk.meta_data.path_in_schema)
            st = chunk.meta_data.statistics
            lo = _fastparquet_value(st.min_value, kinds[name])
            hi = _fastparquet_value(st.max_value, kinds[name])
            group[name] = Stat(st.null_count, lo, hi)
        stats.append(group)
    return [rg.num_rows for rg in pf.row_groups], stats


# --- the readers --------------------------------------------------------------------------


def test_pyarrow_reads_rows_row_groups_statistics_and_metadata(made: Made) -> None:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    pf = pq.ParquetFile(made.path)
    table = pf.read()
    got = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        got[name] = (col.fill_null(0).to_numpy(), col.is_valid().to_numpy(zero_copy_only=False))
    _check_cells(made, got, "pyarrow")
    assert table.schema.metadata == META
    assert table.schema.field("cpu.util_pct").metadata == {b"unit": b"%", b"kind": b"rate"}
    md = pf.metadata
    assert md.num_rows == made.rows
    assert [md.row_group(k).num_rows for k in range(md.num_row_groups)] == [
        n for _, n in made.groups
    ]
    for k in range(md.num_row_groups):
        first, n = made.groups[k]  # each row group alone, found by its offsets
        rows = pf.read_row_group(k, columns=["mono_ns"]).column(0).to_numpy()
        assert np.array_equal(rows, made.columns["mono_ns"].values[first : first + n])
    _check_stats(made, _pyarrow_stats(md), "pyarrow")
    lo, hi = _window(made)
    dataset = ds.dataset(made.path)
    mono = pc.field("mono_ns")
    window = dataset.count_rows(filter=(mono >= lo) & (mono <= hi))
    busy = dataset.count_rows(filter=pc.field("cpu.util_pct") > 99.0)
    assert (window, busy) == _want_count(made)


def test_duckdb_reads_rows_row_groups_statistics_and_metadata(made: Made) -> None:
    duckdb = pytest.importorskip("duckdb")

    con = duckdb.connect()
    path = str(made.path).replace("'", "''")
    select = ", ".join(
        f'epoch_ns("{n}") AS "{n}"' if k == "time" else f'"{n}"' for n, k, _, _ in FIELDS
    )
    arrays = con.sql(f"SELECT {select} FROM read_parquet('{path}')").fetchnumpy()
    got = {}
    for name, arr in arrays.items():
        masked = np.ma.asarray(arr)
        got[name] = (masked.filled(0), ~np.ma.getmaskarray(masked))
    _check_cells(made, got, "duckdb")
    sizes, stats = _duckdb_stats(con, path, {n: k for n, k, _, _ in FIELDS})
    assert sizes == [n for _, n in made.groups]
    _check_stats(made, stats, "duckdb")
    kv = dict(con.sql(f"SELECT key, value FROM parquet_kv_metadata('{path}')").fetchall())
    assert {k: kv[k] for k in META} == META
    lo, hi = _window(made)
    (window,) = con.sql(
        f"SELECT count(*) FROM read_parquet('{path}') WHERE mono_ns BETWEEN {lo} AND {hi}"
    ).fetchall()[0]
    (busy,) = con.sql(
        f"""SELECT count(*) FROM read_parquet('{path}') WHERE "cpu.util_pct" > 99.0"""
    ).fetchall()[0]
    assert (window, busy) == _want_count(made)


def test_polars_reads_rows_and_prunes_by_the_statistics(made: Made) -> None:
    pl = pytest.importorskip("polars")

    df = pl.read_parquet(made.path)
    got = {}
    for name in df.columns:
        s = df[name]
        if s.dtype == pl.Datetime("ns", "UTC"):
            s = s.dt.epoch("ns")
        got[name] = (s.fill_null(0).to_numpy(), s.is_not_null().to_numpy())
    _check_cells(made, got, "polars")
    assert df.schema["time"] == pl.Datetime("ns", "UTC")
    meta = pl.read_parquet_metadata(made.path)
    assert {k: meta[k] for k in ("stroboscope.rows_lost",)} == {"stroboscope.rows_lost": "7"}
    lo, hi = _window(made)
    lazy = pl.scan_parquet(made.path)
    window = lazy.filter(pl.col("mono_ns").is_between(lo, hi)).select(pl.len()).collect()
    busy = lazy.filter(pl.col("cpu.util_pct") > 99.0).select(pl.len()).collect()
    assert (window.item(), busy.item()) == _want_count(made)


def _pandas_cells(df: Any) -> dict[str, tuple[npt.NDArray[Any], Mask]]:
    import pandas as pd

    got = {}
    for name in df.columns:
        s = df[name]
        valid = s.notna().to_numpy()
        if isinstance(s.dtype, pd.DatetimeTZDtype) or s.dtype.kind == "M":
            if isinstance(s.dtype, pd.DatetimeTZDtype):
                s = s.dt.tz_convert("UTC").dt.tz_localize(None)
            ns = s.astype("datetime64[ns]").to_numpy().astype(np.int64)
            got[name] = (ns, valid)
        else:
            dtype = np.int64 if s.dtype.kind in "iu" or str(s.dtype) == "Int64" else np.float64
            got[name] = (s.to_numpy(dtype=dtype, na_value=0), valid)
    return got


def test_pandas_reads_rows_and_the_schema(made: Made) -> None:
    import pandas as pd

    df = pd.read_parquet(made.path)
    assert isinstance(df["time"].dtype, pd.DatetimeTZDtype) and str(df["time"].dt.tz) == "UTC"
    _check_cells(made, _pandas_cells(df), "pandas")
    lo, hi = _window(made)
    part = pd.read_parquet(made.path, filters=[("mono_ns", ">=", lo), ("mono_ns", "<=", hi)])
    assert len(part) == _want_count(made)[0]


@contextlib.contextmanager
def _fastparquet_file(path: Path) -> Iterator[Any]:
    """``fastparquet.ParquetFile`` of ``path``, with every file it opened closed after (it
    leaves them to the garbage collector, which the suite's warnings-as-errors refuses)."""
    import fastparquet

    opened: list[Any] = []

    def open_with(name: str, mode: str = "rb") -> Any:
        f = open(name, mode)  # noqa: SIM115 (closed below)
        opened.append(f)
        return f

    try:
        yield fastparquet.ParquetFile(str(path), open_with=open_with)
    finally:
        for f in opened:
            f.close()


@FASTPARQUET
def test_fastparquet_reads_rows_row_groups_statistics_and_metadata(made: Made) -> None:
    with _fastparquet_file(made.path) as pf:
        _check_fastparquet(made, pf)


def _check_fastparquet(made: Made, pf: Any) -> None:
    assert pf.count() == made.rows
    _check_cells(made, _pandas_cells(pf.to_pandas()), "fastparquet")
    assert {k.decode(): pf.key_value_metadata[k.decode()] for k in META} == {
        k.decode(): v.decode() for k, v in META.items()
    }
    sizes, stats = _fastparquet_stats(pf, {n: k for n, k, _, _ in FIELDS})
    assert sizes == [n for _, n in made.groups]
    _check_stats(made, stats, "fastparquet")
    lo, hi = _window(made)
    # Row groups pruned by their statistics (this fastparquet keeps whole row groups; the
    # rows are filtered here): a row group dropped by a wrong min or max loses rows.
    part = pf.to_pandas(filters=[("mono_ns", ">=", lo), ("mono_ns", "<=", hi)])
    assert len(part) < made.rows or len(made.groups) == 1  # it pruned
    mono = part["mono_ns"]
    assert int(((mono >= lo) & (mono <= hi)).sum()) == _want_count(made)[0]


# --- the output ``stroboscope record`` makes --------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recording longer than its ring: its segments were pieces, joined at its end."""
    from stroboscope.cli import main

    out = tmp_path_factory.mktemp("record") / "run.parquet"
    args = ["--interval", "0.001", "--capacity", "512", "--duration", "1.5", "--quiet"]
    assert main(["record", *args, "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data.count(b"PAR1") >= 8  # each piece's own magic at both ends: it was joined
    return out


def test_the_recorded_output_reads_the_same_in_every_reader(recorded: Path) -> None:
    """Every reader gets pyarrow's cells from the real output, and each row group's statistics
    (pyarrow's, DuckDB's and fastparquet's readings of the footer) are those numpy computes
    from that row group's cells."""
    import pandas as pd

    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    table = pq.read_table(recorded)
    md = pq.read_metadata(recorded)
    assert md.num_rows == table.num_rows > 512 and md.num_row_groups >= 4
    kinds = {}
    columns = {}
    for name in table.column_names:
        col = table.column(name)
        assert col.type in (TYPES["time"], TYPES["int"], TYPES["float"]), (name, col.type)
        kind = next(k for k, t in TYPES.items() if t == col.type)
        kinds[name] = kind
        raw = col.cast(pa.int64()) if kind == "time" else col
        values = raw.fill_null(0).to_numpy()
        columns[name] = Column(kind, values, col.is_valid().to_numpy(zero_copy_only=False))
    first, groups = 0, []
    for k in range(md.num_row_groups):
        groups.append((first, md.row_group(k).num_rows))
        first += md.row_group(k).num_rows
    made = Made(recorded, columns, groups)
    _check_stats(made, _pyarrow_stats(md), "pyarrow on the recording")
    _check_cells(made, _pandas_cells(pd.read_parquet(recorded)), "pandas on the recording")
    df = pl.read_parquet(recorded)
    got = {}
    for name in df.columns:
        s = df[name].dt.epoch("ns") if kinds[name] == "time" else df[name]
        got[name] = (s.fill_null(0).to_numpy(), s.is_not_null().to_numpy())
    _check_cells(made, got, "polars on the recording")
    con = duckdb.connect()
    path = str(recorded).replace("'", "''")
    sizes, stats = _duckdb_stats(con, path, kinds)
    assert sizes == [n for _, n in groups]
    _check_stats(made, stats, "duckdb on the recording")
    select = ", ".join(
        f'epoch_ns("{n}") AS "{n}"' if kinds[n] == "time" else f'"{n}"' for n in kinds
    )
    arrays = con.sql(f"SELECT {select} FROM read_parquet('{path}')").fetchnumpy()
    cells = {}
    for name, arr in arrays.items():
        masked = np.ma.asarray(arr)
        cells[name] = (masked.filled(0), ~np.ma.getmaskarray(masked))
    _check_cells(made, cells, "duckdb on the recording")
    if HAS_FASTPARQUET:
        with _fastparquet_file(recorded) as pf:
            _check_cells(made, _pandas_cells(pf.to_pandas()), "fastparquet on the recording")
            sizes, stats = _fastparquet_stats(pf, kinds)
        assert sizes == [n for _, n in groups]
        _check_stats(made, stats, "fastparquet on the recording")
