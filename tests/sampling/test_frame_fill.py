"""``Frame.to_arrow(fill="forward")`` carries each value until the next reading of its column:
the source's next read, or, for a rate written once per ``cpu_window``/``rate_window``, the next
window's value; a null past that (a failed read) stays null."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._plan import value_holds_ns

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
        raw = s.snapshot().to_arrow()
        filled = s.snapshot().to_arrow(fill="forward")
        # cpu: its 10 ms resolution; network: once per rate window + 5 % (105 ticks)
        periods = {"cpu.": s.stats().source("cpu").every * MS}
        periods["net."] = s.stats().source("network").every * MS
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
        # Each row carries the latest value until the next window's value is due (less half a
        # tick); only where the sampler missed the tick that would have closed the window (a
        # loaded machine) does a row lie past that, and those stay null.
        period = periods[name[:4]]
        late = mono[rows] - mono[latest[rows]] >= value_holds_ns(period, 100 * MS) - MS // 2
        assert np.array_equal(np.isnan(got[rows]), late), name
        assert late.sum() <= 0.05 * len(rows), (name, int(late.sum()))
        assert np.array_equal(got[rows][~late], values[latest[rows]][~late]), name
        assert np.isnan(got[:first]).all()


def test_a_recovered_table_fills_every_null() -> None:
    table = pa.table({"mono_ns": [1, 2, 3], "x": pa.array([1.0, None, None])})
    assert Frame(table).to_arrow(fill="forward").column("x").to_pylist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="fill must be None or 'forward'"):
        Frame(table).to_arrow(fill="back")  # type: ignore[arg-type]
