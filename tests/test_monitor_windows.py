"""The SystemMonitor's windows: each published value is the chosen aggregate of the rows of its
window (the window's own frame, recomputed here), several drains make one window, keys appear
once their source produced a value and then carry over, and counts are never averaged."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _monitor import BASE_KEYS, MiB, Recorder, monitor
from stroboscope.analysis import WindowAggregator
from stroboscope.compat import CompatKeys


@pytest.mark.parametrize("how", ["mean", "max", "last"])
def test_aggregate_matches_the_window_frame(how: str) -> None:
    rec = Recorder()
    mon = monitor(rec, aggregate=how, interval=0.005, capacity=1 << 14)
    mon.start()
    try:
        time.sleep(0.2)
        mon.flush()
        blob = bytearray(64 * 1024 * 1024)  # RSS moves within the window
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            sum(range(1000))
        mon.flush()
        window = mon.last_window
        published = dict(rec.events[1])
        del blob
    finally:
        mon.shutdown()
    assert window is not None and window.rows >= 20
    table = mon.raw_sampler.snapshot().to_arrow()
    mono = table.column("mono_ns").to_numpy()
    rows = (mono >= window.first_mono_ns) & (mono <= window.last_mono_ns)
    assert int(rows.sum()) == window.rows

    def reduce(column: str) -> float:
        values = table.column(column).to_numpy(zero_copy_only=False).astype(float)[rows]
        values = values[~np.isnan(values)]
        return float({"mean": values.mean(), "max": values.max(), "last": values[-1]}[how])

    assert published["cpu"] == pytest.approx(reduce("cpu.util_pct"), rel=1e-12)
    assert published["memory"] == pytest.approx(reduce("mem.util_pct"), rel=1e-12)
    assert published["proc.memory.rssMB"] == pytest.approx(
        reduce("proc.rss_bytes") / MiB, rel=1e-12
    )
    # A running total is never averaged: it is the window's last reading.
    last_sent = table.column("net.sent_bytes").to_numpy(zero_copy_only=False)[rows][-1]
    assert published["network"]["sent"] >= last_sent


def test_window_aggregator_over_several_drains() -> None:
    n = 1000
    rng = np.random.default_rng(7)
    gauge = rng.uniform(0, 100, n)
    gauge[rng.random(n) < 0.2] = np.nan  # nulls are skipped, not zeros
    counter = np.cumsum(rng.integers(0, 1000, n))
    table = pa.table(
        {
            "mono_ns": pa.array(np.arange(n) * 10_000_000, pa.int64()),
            "g": pa.array(gauge, pa.float64(), from_pandas=True),
            "c": pa.array(counter, pa.int64()),
            "never": pa.nulls(n, pa.float64()),
        }
    )
    agg = WindowAggregator(["g", "c", "never", "absent"], counters=["c"])
    for start in range(0, n, 137):
        agg.add(table.slice(start, 137))
    valid = gauge[~np.isnan(gauge)]
    assert agg.result("mean")["g"] == pytest.approx(valid.mean(), rel=1e-12)
    assert agg.result("max")["g"] == valid.max()
    assert agg.result("last")["g"] == valid[-1]
    for how in ("mean", "max", "last"):
        assert agg.result(how)["c"] == counter[-1]
        assert "never" not in agg.result(how)
        assert "absent" not in agg.result(how)
    info = agg.info()
    assert (info.rows, info.first_mono_ns, info.last_mono_ns) == (n, 0, (n - 1) * 10_000_000)
    agg.reset()
    assert agg.result("mean") == {} and agg.info().rows == 0
    with pytest.raises(ValueError, match="aggregate must be one of"):
        agg.result("median")  # type: ignore[arg-type]


def test_keys_appear_once_produced_and_carry_over() -> None:
    columns = [
        "cpu.util_pct",
        "mem.util_pct",
        "net.sent_bytes",
        "net.recv_bytes",
        "gpu.0.util_pct",
        "gpu.0.mem_util_pct",
        "gpu.0.mem_allocated_pct",
        "gpu.0.temp_c",
        "gpu.0.power_w",
        "gpu.0.power_pct",
        "gpu.1.util_pct",
        "gpu.0.mig.1.mem_used_bytes",
    ]
    keys = CompatKeys(columns, rank=1, extended=False)
    assert keys.gpu_labels == ["0", "1"]
    sampler: dict[str, Any] = {}
    keys.update(sampler, {"cpu.util_pct": 10.0}, {"sent": 0, "recv": 0})
    assert sampler == {"rank1.cpu": 10.0}
    keys.update(
        sampler,
        {"mem.util_pct": 5.0, "gpu.0.power_w": 70.0, "net.sent_bytes": 10, "net.recv_bytes": 20},
        {"sent": 100, "recv": 1},
    )
    assert sampler == {
        "rank1.cpu": 10.0,
        "rank1.memory": 5.0,
        "rank1.gpu.0.powerWatts": 70.0,
        "rank1.network": {"sent": 110, "recv": 21},
    }
    keys.update(sampler, {}, {"sent": 0, "recv": 0})  # nothing new: everything carried over
    assert sampler["rank1.cpu"] == 10.0 and sampler["rank1.network"] == {"sent": 110, "recv": 21}


@pytest.mark.parametrize("how", ["mean", "max"])
def test_thread_count_publishes_the_last_value(how: str) -> None:
    """A count is never averaged: 3 ticks with n threads and 1 with n + 2 publish the last
    count (an int), not a mean such as 5.99 threads (issue 9, item 20)."""
    rec = Recorder()
    mon = monitor(rec, aggregate=how, interval=0.01)
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait) for _ in range(2)]
    try:
        sampler = mon.raw_sampler
        assert sampler.tick_now(3) == 3
        for t in extra:
            t.start()
        assert sampler.tick_now(1) == 1
        counts = sampler.snapshot().to_arrow().column("proc.threads").to_pylist()
        mon.flush()
    finally:
        stop.set()
        for t in extra:
            t.join()
        mon.shutdown()
    assert len(counts) == 4 and counts[-1] > counts[0]  # the sampler saw the new threads
    published = rec.events[0]["proc.cpu.threads"]
    assert published == counts[-1] and isinstance(published, int)


def test_key_aggregates_say_which_applies() -> None:
    mon = monitor(Recorder(), aggregate="mean", extended=True)
    try:
        agg = mon.key_aggregates
    finally:
        mon.shutdown()
    assert agg["cpu"] == "mean" and agg["memory"] == "mean" and agg["proc.memory.rssMB"] == "mean"
    assert agg["proc.cpu.threads"] == "last"  # an integer count
    assert agg["network"] == "last" and agg["disk.in"] == "last"  # running totals
    assert set(agg) >= BASE_KEYS


def test_the_monitor_and_the_exporters_reduce_a_window_alike() -> None:
    # One reducer: the monitor's aggregator (several drains) and the exporters' window_stats
    # (one table) give the same count, mean, max and last; NaN cells count as missing in both.
    from stroboscope.analysis.windows import window_stats

    table = pa.table(
        {
            "mono_ns": pa.array([0, 1, 2, 3, 4, 5], pa.int64()),
            "g": pa.array([1.0, float("nan"), None, 4.0, 7.0, float("nan")], pa.float64()),
            "i": pa.array([3, None, 9, 2, None, None], pa.int64()),
        }
    )
    agg = WindowAggregator(["g", "i"])
    agg.add(table.slice(0, 4))
    agg.add(table.slice(4))
    stats = window_stats(table, ["g", "i"])
    assert (stats["g"].count, stats["g"].mean, stats["g"].maximum, stats["g"].last) == (
        3,
        4.0,
        7.0,
        7.0,
    )
    assert (stats["i"].count, stats["i"].mean, stats["i"].maximum, stats["i"].last) == (
        3,
        14 / 3,
        9.0,
        2.0,
    )
    assert agg.result("mean") == {"g": 4.0, "i": pytest.approx(14 / 3, rel=1e-12)}
    assert agg.result("max") == {"g": 7.0, "i": 9}
    assert agg.result("last") == {"g": 7.0, "i": 2}
