"""Sampling on the C++ thread: row counts, timestamps and content at 1 kHz; process exit."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import psutil
from stroboscope import Sampler


def test_one_khz_for_a_second_while_python_is_busy() -> None:
    s = Sampler(0.001)
    t0_wall = time.time_ns()
    t0 = time.monotonic_ns()
    s.start()
    # Keep the main thread busy in pure Python: the sampler must not need the GIL.
    x = 0
    while time.monotonic_ns() - t0 < 1_000_000_000:
        x += 1
    s.stop()
    t1 = time.monotonic_ns()
    table = s.snapshot().to_arrow()
    st = s.stats()
    # Generous bounds on the count (a shared 2-core machine): content is what is checked.
    assert 300 <= table.num_rows <= 1100
    assert table.num_rows == st.rows_written == st.ticks_taken
    mono = table.column("mono_ns").to_numpy()
    assert np.all(np.diff(mono) > 0)
    assert t0 <= mono[0] and mono[-1] <= t1  # same clock as time.monotonic_ns()
    wall = table.column("time").cast("int64").to_numpy()
    assert abs(int(wall[0]) - t0_wall) < 50_000_000  # UTC time within 50 ms of time.time_ns()
    # Median spacing is the interval (1 ms ± 0.3 ms) even if some ticks were skipped.
    assert 700_000 <= int(np.median(np.diff(mono))) <= 1_300_000
    mem_total = table.column("mem.total_bytes").to_numpy()
    assert np.all(mem_total == psutil.virtual_memory().total)
    rss = table.column("proc.rss_bytes").drop_null().to_numpy()
    assert len(rss) >= table.num_rows - 1
    assert abs(int(rss[-1]) - psutil.Process().memory_info().rss) < 16 << 20
    util = table.column("cpu.util_pct").drop_null().to_numpy()
    assert np.all((util >= 0) & (util <= 100))
    assert x > 0


def test_monitored_process_exits_mid_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    s = Sampler(0.005, pid=child.pid, sources=["memory", "process"])
    with s:
        child.wait()
        time.sleep(0.2)
        st = s.stats()
    table = s.snapshot().to_arrow()
    rss = table.column("proc.rss_bytes").to_pylist()
    mem = table.column("mem.available_bytes").to_pylist()
    assert rss[0] is not None and rss[-1] is None  # process columns became null...
    assert all(v is not None for v in mem)  # ...system columns continued
    assert st.process_exited
    proc = next(src for src in st.sources if src.name == "process")
    assert proc.reason == "process exited" and proc.failures > 10
    assert st.running  # the sampler never stopped


def test_cpu_percent_uses_windows_of_at_least_cpu_window() -> None:
    s = Sampler(0.001, sources=["cpu", "process"], cpu_window=0.05)
    with s:
        time.sleep(0.6)
    table = s.snapshot().to_arrow()
    mono = table.column("mono_ns").to_numpy()
    for name in ("cpu.util_pct", "proc.cpu_pct"):
        valid = table.column(name).is_valid().to_numpy(zero_copy_only=False)
        times = mono[valid]
        assert 5 <= len(times) <= 13, name  # ~0.6 s / 50 ms
        assert np.all(np.diff(times) >= 50_000_000), name
        values = table.column(name).drop_null().to_numpy()
        assert np.all((values >= 0) & (values <= 100 * 4)), name


def test_cpu_window_zero_reads_every_tick() -> None:
    s = Sampler(0.002, sources=["process"], cpu_window=0)
    s.tick_now(5)
    assert s.snapshot().to_arrow().column("proc.cpu_pct").null_count == 1  # only the first read


def test_byte_rates_use_windows_of_at_least_rate_window() -> None:
    s = Sampler(0.001, sources=["network", "diskio"], rate_window=0.05)
    with s:
        time.sleep(0.5)
    table = s.snapshot().to_arrow()
    mono = table.column("mono_ns").to_numpy()
    for name in ("net.sent_bytes_per_s", "disk.write_bytes_per_s"):
        valid = table.column(name).is_valid().to_numpy(zero_copy_only=False)
        assert 4 <= int(valid.sum()) <= 11, name  # ~0.5 s / 50 ms
        assert np.all(np.diff(mono[valid]) >= 50_000_000), name
    # Totals are still on every row.
    assert table.column("net.sent_bytes").null_count == 0
    import pytest

    with pytest.raises(ValueError, match="rate_window must be"):
        Sampler(0.001, sources=["network"], rate_window=-1)
