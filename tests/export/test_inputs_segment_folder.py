"""A folder of segments whose spool is gone (``*.seg-NNNNNN.parquet``) is read as one run:
rows a retried segment write repeated are kept once, in order, and none other is dropped."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _scope_tables import frame
from stroboscope.export.report import build_report

MS = 1_000_000


def segment(first: int, last: int) -> object:
    """Rows ``first..last`` (inclusive) of a run: mono k ms, ``cpu.util_pct`` = k (a value that
    names its row)."""
    rows = list(range(first, last + 1))
    return frame([k * MS for k in rows], {"cpu.util_pct": [float(k) for k in rows]})


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        ([(0, 9), (5, 14)], list(range(15))),  # the second write repeated rows 5..9
        ([(0, 9), (10, 19), (10, 19), (20, 24)], list(range(25))),  # a whole segment twice
        ([(0, 9), (12, 14)], [*range(10), 12, 13, 14]),  # rows lost between: no dedupe there
    ],
)
def test_repeated_rows_are_kept_once(
    tmp_path: Path, segments: list[tuple[int, int]], expected: list[int]
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for index, (first, last) in enumerate(segments, start=1):
        pq.write_table(segment(first, last), folder / f"run.spool.seg-{index:06d}.parquet")
    (series,) = build_report([str(folder)]).series
    assert series.label == "run.spool"
    assert series.table.column("mono_ns").to_pylist() == [k * MS for k in expected]
    assert series.table.column("cpu.util_pct").to_pylist() == [float(k) for k in expected]
