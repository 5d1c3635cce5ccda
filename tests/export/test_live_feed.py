"""The live view's feed of one recording (export/live_feed.py): on attaching, the window's rows
that the ring no longer holds are read from the recorder's segments, so a 10-minute window is
full at once; and the footer says when its figures are inferred (no recorder's figures)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _live_spools import write_spool
from stroboscope.export.live_feed import Feed
from stroboscope.formats.segments import FIRST_ROW_KEY, segment_path

INTERVAL = 100_000_000  # 100 ms: 6,000 rows in 10 minutes
ROWS = 6_000
CAPACITY = 1_024  # the ring holds the newest 1,024 rows (102 s)
SPIKE = 500  # one row at 100 %, 550 s before the newest: only the segments still hold it


def _recording(tmp_path: Path, segments: bool) -> Path:
    mono = 10**12 + np.arange(ROWS, dtype=np.int64) * INTERVAL
    cpu = np.full(ROWS, 5.0)
    cpu[SPIKE] = 100.0
    spool = write_spool(
        tmp_path / "r.spool",
        mono,
        {"cpu.util_pct": ("%", cpu)},
        capacity=CAPACITY,
        interval_ns=INTERVAL,
    )
    if segments:  # rows [0, 5,000) in five segment files, as the recorder's writer leaves them
        for k, first in enumerate(range(0, 5_000, 1_000)):
            table = pa.table(
                {
                    "mono_ns": pa.array(mono[first : first + 1_000]),
                    "cpu.util_pct": pa.array(cpu[first : first + 1_000]),
                }
            ).replace_schema_metadata({FIRST_ROW_KEY: str(first).encode()})
            pq.write_table(table, segment_path(spool, k + 1))
    return spool


def test_attaching_reads_the_windows_older_rows_from_the_segments(tmp_path: Path) -> None:
    feed = Feed("r", str(_recording(tmp_path, segments=True)))
    try:
        feed.poll()  # the ring's rows
        series = feed.series["cpu.util_pct"]
        hi_ns = 10**12 + ROWS * INTERVAL
        lo, hi = series.extremes(hi_ns - 600 * 10**9, hi_ns, 120)  # a 10-minute window
    finally:
        feed.close()
    assert feed.rows == ROWS  # every row once: 4,976 from segments, 1,024 from the ring
    assert not np.isnan(hi).any()  # full from its first column (5 s each) to its last
    assert np.nanmax(hi) == 100.0 and int(np.nanargmax(hi)) == 10  # 50 s in: column 10
    assert np.nanmin(lo) == 5.0
    assert feed.footer().startswith("inferred: ticks missed 0 ")  # no gap: none missed


def test_without_segments_the_window_starts_at_the_ring(tmp_path: Path) -> None:
    feed = Feed("r", str(_recording(tmp_path, segments=False)))
    try:
        feed.poll()
        hi_ns = 10**12 + ROWS * INTERVAL
        _lo, hi = feed.series["cpu.util_pct"].extremes(hi_ns - 600 * 10**9, hi_ns, 120)
    finally:
        feed.close()
    assert feed.rows == CAPACITY
    assert np.isnan(hi[:90]).all() and np.nanmax(hi) == 5.0  # the spike is gone with the ring
