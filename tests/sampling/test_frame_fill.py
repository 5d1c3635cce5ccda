"""``Frame.to_arrow(fill="forward")`` carries each value until the next reading of its column:
the source's next read, or, for a rate written once per ``cpu_window``/``rate_window``, the next
window's value, however late missed ticks make that reading; only from a failed read on (which
a sampler's frame knows: ``_core.Frame.failed_reads``) does a null stay null."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pytest
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling._frame import Frame, forward_filled
from stroboscope.sampling._plan import value_holds_ns

if TYPE_CHECKING:
    from stroboscope import _core

MS = 1_000_000


def test_value_holds_until_the_next_reading() -> None:
    assert value_holds_ns(MS, 0) == MS  # a value per read
    assert value_holds_ns(4 * MS, 0) == 4 * MS
    # A rate over 100 ms windows: the read at 100 ms, or, when that tick woke a few µs short of
    # the window's end, the next one.
    assert value_holds_ns(MS, 100 * MS) == 101 * MS  # read every tick at 1 kHz
    assert value_holds_ns(10 * MS, 100 * MS) == 110 * MS  # read every 10 ticks
    assert value_holds_ns(30 * MS, 100 * MS) == 120 * MS  # the first read past the window
    assert value_holds_ns(200 * MS, 100 * MS) == 200 * MS  # reads slower than the window


def test_forward_fill_of_a_windowed_column_on_a_hand_built_frame() -> None:
    # 1 ms ticks. "rate" is written once per 10 ms window (read every tick): values at rows 2
    # and 12; the window ending at row 22 (or 23, had row 22 woken a µs early) failed; values
    # again at 32. "gauge" is read every 4 ticks: rows 0, 4, 8 ... with the read at 16 failed.
    n = 40
    mono = np.arange(n, dtype=np.int64) * MS
    rate: list[float | None] = [None] * n
    for row, v in ((2, 1.5), (12, 2.5), (32, 3.5)):
        rate[row] = v
    gauge: list[int | None] = [None] * n
    for row in range(0, n, 4):
        gauge[row] = 100 + row if row != 16 else None
    table = pa.table(
        {
            "mono_ns": pa.array(mono, pa.int64()),
            "rate": pa.array(rate, pa.float64()),
            "gauge": pa.array(gauge, pa.int64()),
        }
    )
    half = MS // 2  # the plan's allowance for a late tick
    within = {
        "rate": value_holds_ns(MS, 10 * MS) - half,
        "gauge": value_holds_ns(4 * MS, 0) - half,
    }
    filled = Frame(table, fill_within_ns=within).to_arrow(fill="forward")
    want_rate: list[float | None] = [None, None] + [1.5] * 10 + [2.5] * 11 + [None] * 9
    want_rate += [3.5] * 8
    assert filled.column("rate").to_pylist() == want_rate
    want_gauge: list[int | None] = []
    for row in range(n):
        last = row - row % 4
        want_gauge.append(None if last == 16 else 100 + last)
    assert filled.column("gauge").to_pylist() == want_gauge


def test_forward_fill_carries_window_rates_of_a_real_sampler() -> None:
    s = Sampler(
        0.001,
        sources=["cpu", "network"],
        cpu_window=0.1,
        rate_window=0.1,
        max_overhead=None,  # each source at its own period, never slowed mid-run
    )
    try:
        s.start()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:  # three windows of each, however loaded the machine
            t = s.snapshot().to_arrow()
            if (
                min(
                    t.column(c).drop_null().length()
                    for c in ("cpu.util_pct", "net.recv_bytes_per_s")
                )
                >= 3
            ):
                break
            time.sleep(0.05)
        s.stop()
        frame = s.snapshot()
        raw = frame.to_arrow()
        filled = frame.to_arrow(fill="forward")
        # each source's failed reads, by its columns (none, unless a read really failed)
        failed = {c: starts for cols, starts, _ in frame._rows.failed_reads for c, _ in cols}
    finally:
        s.close()
    assert raw.column("cpu.util_pct").drop_null().length() >= 3
    mono = np.asarray(raw.column("mono_ns").to_numpy(), dtype=np.int64)
    for name in ("cpu.util_pct", "net.recv_bytes_per_s"):
        values = raw.column(name).to_numpy(zero_copy_only=False).astype(float)
        have = ~np.isnan(values)
        first = int(np.argmax(have))
        # Most rows of a 100 ms window rate are null before the fill...
        assert (~have[first:]).sum() > 0.8 * (len(values) - first), name
        got = filled.column(name).to_numpy(zero_copy_only=False).astype(float)
        latest = np.maximum.accumulate(np.where(have, np.arange(len(values)), -1))
        rows = np.arange(first, len(values))
        # Each row carries the latest value until the next window's value, also where the
        # sampler missed the tick that would have closed the window (a loaded machine): only
        # a row after a failed read of its source (none, as a rule) is null.
        starts = np.asarray(failed[name], dtype=np.int64)
        after_failure = np.searchsorted(starts, mono[rows], "right") > np.searchsorted(
            starts, mono[latest[rows]], "right"
        )
        assert np.array_equal(np.isnan(got[rows]), after_failure), name
        assert after_failure.sum() <= 0.05 * len(rows), (name, starts)
        kept = ~after_failure
        assert np.array_equal(got[rows][kept], values[latest[rows]][kept]), name
        assert np.isnan(got[:first]).all()


def test_a_recovered_table_fills_every_null() -> None:
    table = pa.table({"mono_ns": [1, 2, 3], "x": pa.array([1.0, None, None])})
    assert Frame(table).to_arrow(fill="forward").column("x").to_pylist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="fill must be None or 'forward'"):
        Frame(table).to_arrow(fill="back")  # type: ignore[arg-type]


# A scripted run with missed ticks (1 ms base tick): the source "g" (columns g.value and g.tid,
# no window) is read every 4 ticks; "r" (r.bytes every tick, r.rate once per 10 ms window) every
# tick. Tick 3 woke 2.6 ms late (the thread was descheduled), so ticks 4 and 5 were skipped: g's
# read due on tick 4 came on tick 6 at 6.0 ms, past its 3.5 ms limit from its last value.
#            tick:    0    1    2    3     6    7    8    9   10   11   12   13
MONO_US = np.array([0, 1000, 2000, 5600, 6000, 7000, 8000, 9000, 10_000, 11_000, 12_000, 13_000])
G_VALUE = [100, None, None, None, 106, None, None, None, 110, None, None, None]
G_TID = [7, None, None, None, 7, None, None, None, None, None, None, None]  # none at tick 10
R_RATE = [1.5, None, None, None, None, None, None, None, None, None, 2.5, None]  # window late


def _scripted(
    g_value: list[int | None] = G_VALUE,
) -> tuple[pa.Table, dict[str, int]]:
    n = len(MONO_US)
    table = pa.table(
        {
            "mono_ns": pa.array(MONO_US * 1000, pa.int64()),
            "g.value": pa.array(g_value, pa.int64()),
            "g.tid": pa.array(G_TID, pa.int64()),
            "r.bytes": pa.array(list(range(n)), pa.int64()),
            "r.rate": pa.array(R_RATE, pa.float64()),
        }
    )
    half = MS // 2
    within = {
        "g.value": value_holds_ns(4 * MS, 0) - half,
        "g.tid": value_holds_ns(4 * MS, 0) - half,
        "r.bytes": value_holds_ns(MS, 0) - half,
        "r.rate": value_holds_ns(MS, 8 * MS) - half,  # 8.5 ms after 1.5 at 0 ms: 9 ms
    }
    return table, within


def _reads(g_failed: tuple[int, ...] = (), complete: bool = True) -> list[_core.FailedReads]:
    return [
        ((("g.value", 0), ("g.tid", 0)), g_failed, complete),
        ((("r.bytes", 0), ("r.rate", 8 * MS)), (), True),
    ]


def test_a_value_is_carried_to_a_reading_that_missed_ticks_delayed() -> None:
    table, within = _scripted()
    filled = forward_filled(table, within, _reads())
    # the late tick 3 (5.6 ms after g's value, its source not due) carries the value on
    assert filled.column("g.value").to_pylist() == [100] * 4 + [106] * 4 + [110] * 4
    # the rate's window closed late (at 12 ms, not by 9.5 ms): carried through, bytes or not
    assert filled.column("r.rate").to_pylist() == [1.5] * 10 + [2.5] * 2
    # a reading of g that said "none" for g.tid (tick 10, 4 ms after its 7): null from there
    assert filled.column("g.tid").to_pylist() == [7] * 8 + [None] * 4
    # without the log (what the fill knew before): the late rows are taken for failed reads
    before = forward_filled(table, within)
    assert before.column("g.value").to_pylist()[3] is None
    assert before.column("r.rate").to_pylist()[9] is None


def test_a_failed_read_leaves_nulls_until_the_next_value() -> None:
    # g's read on tick 8 (8 ms) failed; tick 12's read (12 ms) gave 112 again
    g = [100, None, None, None, 106, None, None, None, None, None, 112, None]
    table, within = _scripted(g)
    filled = forward_filled(table, within, _reads(g_failed=(8 * MS,)))
    # from the failed read on (8 ms, within the 3.5 ms of 106 at 6 ms: the read failed all the
    # same) null until the next value
    want = [100] * 4 + [106, 106, None, None, None, None, 112, 112]
    assert filled.column("g.value").to_pylist() == want
    # a log that lost its older runs (complete=False) knows no failure before its oldest entry:
    # a value before that is carried only within its limit, as without a log
    older = forward_filled(table, within, _reads((8 * MS,), complete=False))
    assert older.column("g.value").to_pylist()[3] is None  # 5.6 ms past 100 at 0 ms
    assert older.column("g.value").to_pylist()[6:] == want[6:]


def test_a_real_failed_read_is_in_the_frame_and_stays_null() -> None:
    # A process that exits while sampled: its source's reads fail from then on. The frame says
    # when they began to fail (a row's mono_ns), and the fill leaves every row from there null
    # while carrying each value up to it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    s = Sampler(0.002, pid=child.pid, sources=["process"], max_overhead=None)
    try:
        s.start()
        child.wait()
        deadline = time.monotonic() + 10.0
        while s.stats().source("process").failures < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        s.stop()
        frame = s.snapshot()
    finally:
        s.close()
    failed = {c: starts for cols, starts, _ in frame._rows.failed_reads for c, _ in cols}
    assert len(failed["proc.rss_bytes"]) == 1, failed  # one run of failures, not one per read
    start = failed["proc.rss_bytes"][0]
    raw = frame.to_arrow()
    mono = raw.column("mono_ns").to_pylist()
    assert start in mono  # the row of the first failed read
    at = mono.index(start)
    rss = raw.column("proc.rss_bytes").to_pylist()
    assert all(v is None for v in rss[at:])
    assert any(v is not None for v in rss[:at])  # it was read before it exited
    filled = frame.to_arrow(fill="forward").column("proc.rss_bytes").to_pylist()
    assert all(v is None for v in filled[at:])  # from the failed read on: null, not carried
