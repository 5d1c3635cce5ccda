"""The column statistics read a part (a row group) at a time equal those of the whole table: a
Parquet file of many row groups with nulls, NaNs, sparse columns, identifiers and counters,
its spacings jittered with a few long gaps so that the exact median is found by narrowing
passes, checked against the whole table's figures and against numpy on the whole columns."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.analysis import column_stats as cs

ROWS = 150_000
GROUP = 16_384


def _field(name: str, kind: str, unit: str, typ: pa.DataType) -> pa.Field:
    return pa.field(name, typ, metadata={b"unit": unit.encode(), b"kind": kind.encode()})


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    gaps = 1_000_000 + rng.integers(-40_000, 40_000, ROWS)  # 1 ms +- 40 us
    gaps[rng.integers(1, ROWS, 12)] += 2_000_000_000  # a few stalls
    gaps[0] = 0
    mono = 5 * 10**12 + np.cumsum(gaps)
    every10 = np.arange(ROWS) % 10 == 3
    level = rng.random(ROWS) * 100.0
    level[rng.integers(0, ROWS, 500)] = np.nan  # NaN readings are not readings
    rate = rng.random(ROWS) * 37.5
    counter = np.cumsum(rng.integers(0, 4096, ROWS)).astype(np.int64)
    tid = rng.choice([4101, 4202, 4303], ROWS, p=[0.3, 0.4, 0.3])
    rate_valid = rng.random(ROWS) > 0.05
    rate_valid[0] = False  # a rate's first row is empty
    cols = {
        "time": pa.array(mono + 1_790_000_000 * 10**9, pa.timestamp("ns", tz="UTC")),
        "mono_ns": pa.array(mono, pa.int64()),
        "cpu.util_pct": pa.array(level, pa.float64()),
        "net.recv_bytes_per_s": pa.array(rate, pa.float64(), mask=~rate_valid),
        "mem.used_bytes": pa.array(rng.integers(0, 2**40, ROWS), pa.int64(), mask=~every10),
        "net.recv_bytes": pa.array(counter, pa.int64(), mask=~every10),
        "threads.top0.tid": pa.array(tid, pa.int64(), mask=rng.random(ROWS) < 0.1),
        "proc.threads": pa.array(np.full(ROWS, 3), pa.int64()),
        "gpu.0.power_w": pa.nulls(ROWS, pa.float64()),
    }
    fields = [
        pa.field("time", pa.timestamp("ns", tz="UTC")),
        pa.field("mono_ns", pa.int64()),
        _field("cpu.util_pct", "rate", "%", pa.float64()),
        _field("net.recv_bytes_per_s", "rate", "bytes/s", pa.float64()),
        _field("mem.used_bytes", "gauge", "bytes", pa.int64()),
        _field("net.recv_bytes", "counter", "bytes", pa.int64()),
        _field("threads.top0.tid", "gauge", "id", pa.int64()),
        _field("proc.threads", "gauge", "count", pa.int64()),
        _field("gpu.0.power_w", "gauge", "W", pa.float64()),
    ]
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(fields))


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("streamed") / "run.parquet"
    pq.write_table(_table(), path, row_group_size=GROUP)
    assert pq.ParquetFile(path).num_row_groups == -(-ROWS // GROUP)
    return path


def _row_groups(path: Path, calls: list[Sequence[str] | None]) -> cs.Parts:
    def parts(columns: Sequence[str] | None) -> Iterator[pa.Table]:
        calls.append(columns)
        keep = None if columns is None else ["time", "mono_ns", *columns]
        with pq.ParquetFile(path) as f:
            for group in range(f.num_row_groups):
                yield f.read_row_group(group, columns=keep)

    return parts


def _slices(table: pa.Table, n: int, calls: list[Sequence[str] | None]) -> cs.Parts:
    def parts(columns: Sequence[str] | None) -> Iterator[pa.Table]:
        calls.append(columns)
        for first in range(0, table.num_rows, n):  # offsets inside bytes of the null bits
            yield table.slice(first, n)

    return parts


@pytest.mark.parametrize(
    "bins, collect, slices", [(cs._BINS, cs._COLLECT, 0), (4, 3, 0), (cs._BINS, 100, 9_999)]
)
def test_streamed_figures_equal_the_whole_tables(
    recording: Path, monkeypatch: pytest.MonkeyPatch, bins: int, collect: int, slices: int
) -> None:
    whole = pq.read_table(recording)
    expected = cs.column_stats(whole)  # read before the narrowing is made coarse
    monkeypatch.setattr(cs, "_BINS", bins)  # 4 bins, 3 kept: many narrowing passes
    monkeypatch.setattr(cs, "_COLLECT", collect)
    calls: list[Sequence[str] | None] = []
    parts = _slices(whole, slices, calls) if slices else _row_groups(recording, calls)
    rows, streamed = cs.column_stats_streamed(parts)
    assert calls[0] is None and len(calls) >= 2  # every column once, then the medians
    assert [s.name for s in streamed] == [s.name for s in expected]
    for got, want in zip(streamed, expected):
        mean = None if want.mean is None else pytest.approx(want.mean, rel=1e-12)
        assert got.mean == mean, got.name  # its last bits: the order of the sums
        assert got.__dict__ | {"mean": None} == want.__dict__ | {"mean": None}, got.name
    mono = whole.column("mono_ns").to_numpy()
    assert rows == cs.RowsFigures(ROWS, (mono[-1] - mono[0]) / 1e9, np.median(np.diff(mono)) / 1e9)
    assert cs.stats_text(rows, streamed) == cs.column_stats_text(whole, stats=streamed)


def test_streamed_figures_against_numpy_on_whole_columns(recording: Path) -> None:
    whole = pq.read_table(recording)
    _, streamed = cs.column_stats_streamed(_row_groups(recording, []))
    got = {s.name: s for s in streamed}
    mono = whole.column("mono_ns").to_numpy()

    def readings(name: str) -> tuple[np.ndarray, np.ndarray]:
        v = whole.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
        keep = ~np.isnan(v)
        return v[keep], mono[keep]

    level, at = readings("cpu.util_pct")
    s = got["cpu.util_pct"]
    assert (s.samples, s.min, s.max, s.last) == (len(level), level.min(), level.max(), level[-1])
    assert s.mean == pytest.approx(level.mean(), rel=1e-12)
    assert s.every_s == np.median(np.diff(at)) / 1e9  # NaN rows are not its samples
    counter, at = readings("net.recv_bytes")
    c = got["net.recv_bytes"]
    assert (c.samples, c.total) == (ROWS // 10 + (ROWS % 10 > 3), counter[-1] - counter[0])
    assert c.rate == (counter[-1] - counter[0]) / ((at[-1] - at[0]) / 1e9)
    assert c.every_s == np.median(np.diff(at)) / 1e9
    tid, _ = readings("threads.top0.tid")
    values, counts = np.unique(tid, return_counts=True)
    t = got["threads.top0.tid"]
    assert (t.kind, t.mean, t.distinct, t.last) == (cs.IDENTIFIER, None, 3, tid[-1])
    assert (t.mode, t.mode_samples) == (values[np.argmax(counts)], counts.max())
    assert (got["gpu.0.power_w"].samples, got["gpu.0.power_w"].every_s) == (0, None)
    assert got["proc.threads"].every_s == np.median(np.diff(mono)) / 1e9


# The figures of the file in argv[1], a row group at a time, in a process that never had pandas.
_CHILD = """
import sys
import pyarrow.parquet as pq
from stroboscope.analysis.column_stats import column_stats_streamed, stats_text
def parts(columns):
    keep = None if columns is None else ["time", "mono_ns", *columns]
    with pq.ParquetFile(sys.argv[1]) as f:
        for group in range(f.num_row_groups):
            yield f.read_row_group(group, columns=keep)
rows, figures = column_stats_streamed(parts)
print(stats_text(rows, figures).splitlines()[0])
print("pandas" in sys.modules)
"""


def test_the_streamed_figures_never_load_pandas(recording: Path) -> None:
    """pandas (35-45 MiB) is loaded by pyarrow on its first ``to_numpy``: ``record``'s end
    computes these figures without one."""
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, str(recording)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    first, pandas = got.stdout.splitlines()
    assert first.startswith(f"{ROWS} rows over ")
    assert pandas == "False"
