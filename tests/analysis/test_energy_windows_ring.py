"""Energy windows that outlive the ring: the begin's rows kept when the window opened (or around
its begin, once another window call saw them), by hand on a made frame and on the fake NVML."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from _fake_nvml import ScriptFn, read_times
from stroboscope.analysis.energy import window_energy
from stroboscope.sampling import CoreSampler as Sampler


def frame(t: list[int], energy: list[float]) -> pa.Table:
    return pa.table(
        {
            "mono_ns": pa.array(t, pa.int64()),
            "gpu.read_mono_ns": pa.array(t, pa.int64()),
            "gpu.0.energy_mj": pa.array(energy, pa.float64()),
        }
    )


def test_the_begin_is_carried_forward_from_the_rows_kept_before_it() -> None:
    before = frame([0, 1000, 2000], [0, 10, 20])  # kept when the window opened at 2500 ns
    ring = frame([10000, 11000, 12000], [200, 210, 220])  # what the ring still holds at the end
    a, b = 2500, 11500
    alone = window_energy(ring, a, b, max_power_w=1e9)[0]
    assert alone.method == "none" and "no reading at or before the window's begin" in (
        alone.reason or ""
    )
    w = window_energy(ring, a, b, max_power_w=1e9, before=before)[0]
    assert w.method == "counter" and w.extrapolated and not w.hard_bounds
    # At a: the last step's mean power (10 mJ per 1000 ns) carried 500 ns on: 25 mJ (not 31.25
    # mJ, the line from 20 mJ at 2000 ns to 200 mJ at 10000 ns across the rows lost).
    # At b: linear between 210 and 220: 215 mJ.
    assert w.joules == pytest.approx((215 - 25) / 1000)
    # The highest least power of a step: 180 mJ within 10000 - 1000 ns = 20000 W (mJ/ms).
    assert w.counter is not None and w.counter.max_step_power_w == pytest.approx(20000)
    # Bounds (1 mJ resolution each side): a in [20, 20 + 20000 W x (2500 - 1000) ns] = [20, 50];
    # b in [210, 210 + 20000 W x (11500 - 10000) ns] = [210, 240].
    assert w.low_j == pytest.approx((209 - 51) / 1000)
    assert w.high_j == pytest.approx((241 - 19) / 1000)


def wait_rows(s: Sampler, rows: int) -> None:
    """Wait (60 s at most) until the running sampler has written ``rows`` rows."""
    deadline = time.monotonic() + 60
    while (written := s.stats().rows_written) < rows:
        assert time.monotonic() < deadline, f"{written} of {rows} rows after 60 s"
        time.sleep(0.002)


def counter_script() -> str:
    return "devices 1\nset 0 power_limit 100000000\nset 0 energy " + " ".join(
        str(1000 * k) for k in range(64)
    )


def test_a_window_longer_than_the_ring(nvml: ScriptFn) -> None:
    nvml(counter_script())
    s = Sampler(0.001, sources={"memory": None, "gpu": 0.005}, capacity=64, gpu_samples=False)
    with s:
        wait_rows(s, 20)
        begun = s.stats().rows_written
        s.begin_energy_window("long")
        wait_rows(s, begun + 3 * 64)  # the ring went round three times
        w = s.end_energy_window("long", timeout=30)
    assert w.note is not None and "carried forward" in w.note
    g = w.gpus[0]
    assert g.method == "counter" and g.extrapolated and not g.hard_bounds
    assert 0 < g.low_j <= g.joules <= g.high_j
    del s


def test_a_long_window_keeps_its_begin_seen_by_a_later_call(nvml: ScriptFn) -> None:
    nvml(counter_script())
    # A ring of 2 s at 2 ms: the rows around the begin are still in it when "short" runs, even
    # if this thread is not scheduled for a while (128 rows, a quarter second, were not enough).
    capacity = 1024
    s = Sampler(0.002, sources={"memory": None, "gpu": 0.02}, capacity=capacity, gpu_samples=False)
    with s:
        wait_rows(s, 20)
        s.begin_energy_window("long")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # 3 readings after the begin, still in the ring
            reads = s.snapshot().to_arrow().column("gpu.read_mono_ns").drop_null().to_pylist()
            if sum(x > s._energy.opened["long"].begin_ns for x in reads) >= 3:
                break
            time.sleep(0.001)
        with s.energy_window("short"):  # this call keeps the rows around "long"'s begin
            pass
        kept = s._energy.opened["long"].edge
        assert kept is not None
        # The ring went round once and a quarter: the kept rows and the window's first rows
        # after them are gone from it.
        wait_rows(s, s.stats().rows_written + capacity + capacity // 4)
        w = s.end_energy_window("long", timeout=30)
    assert w.note is not None and "rows inside the window" in w.note
    g = w.gpus[0]
    assert g.method == "counter"
    # The begin's value: linear between the kept readings around it, by hand.
    rows = kept.filter(kept.column("gpu.0.energy_mj").is_valid())
    t = read_times(rows, "gpu.0.energy_mj")
    e = [float(v) for v in rows.column("gpu.0.energy_mj").to_pylist()]
    k = max(i for i in range(len(t)) if t[i] <= w.begin_ns)
    at_a = e[k] + (e[k + 1] - e[k]) * (w.begin_ns - t[k]) / (t[k + 1] - t[k])
    alone = window_energy(kept, w.begin_ns, t[k + 1], max_power_w=1e9)[0]
    assert alone.joules == pytest.approx((e[k + 1] - at_a) / 1000)
    assert 0 < g.low_j <= g.joules <= g.high_j
    del s
