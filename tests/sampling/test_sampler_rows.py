"""Sampling on the C++ thread: row counts, timestamps and content at 1 kHz; process exit."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pytest
from _fake_proc import PID, FakeProc
from _paths import DATA
from stroboscope import Sampler


def test_one_khz_while_python_holds_the_gil() -> None:
    # No overhead budget: the rows of every tick are checked (a loaded machine trips the
    # default budget, which then reads `process` every 2 ms: 586 RSS values in 697 rows).
    s = Sampler(0.001, max_overhead=None)
    data = [random.random() for _ in range(1_000_000)]
    t0 = time.monotonic_ns()
    s.start()
    time.sleep(0.05)
    a = time.monotonic_ns()
    data.sort()  # one C call that holds the GIL throughout: no bytecode, no switch interval
    b = time.monotonic_ns()
    rss_now = psutil.Process().memory_info().rss
    s.stop()
    t1 = time.monotonic_ns()
    m1 = time.monotonic_ns()
    now_wall = time.time_ns()
    m2 = time.monotonic_ns()
    table = s.snapshot().to_arrow()
    st = s.stats()
    interval = 1_000_000
    assert table.num_rows == st.rows_written == st.ticks_taken
    mono = table.column("mono_ns").to_numpy()
    assert t0 <= mono[0] and mono[-1] <= t1  # same clock as time.monotonic_ns()
    # The sampler does not need the GIL: it kept taking ticks while sort() held it. (A sampler
    # waiting for the GIL would stamp at most one row inside, then block until sort() returned.)
    assert b - a > 20 * interval, "sort() too fast to show anything: give it more data"
    assert int(((mono > a) & (mono < b)).sum()) >= 2
    # Bounds from what the sampler reports about itself, not from how busy the machine is:
    # deadlines passed cannot outnumber the elapsed intervals, and they cover the rows' span.
    assert st.ticks_scheduled <= (t1 - t0) // interval + 1
    assert st.ticks_scheduled * interval >= mono[-1] - mono[0]
    # Each row is stamped at its deadline plus its lateness, and deadlines are >= 1 interval
    # apart: consecutive rows are at least an interval minus the worst lateness apart...
    assert np.all(np.diff(mono) >= interval - st.lateness_max_ns)
    # ...and the rows span at most the deadlines taken or skipped, plus the worst lateness.
    assert mono[-1] - mono[0] <= (st.ticks_scheduled - 1) * interval + st.lateness_max_ns
    # time is mono + the realtime anchor: the same anchor Python sees, within both brackets.
    wall = table.column("time").cast("int64").to_numpy()
    anchor = int(wall[0]) - int(mono[0])
    assert len(set((wall - mono).tolist())) == 1
    slack = st.clock_anchor_uncertainty_ns + (m2 - m1) + 1_000_000  # + NTP slew since start
    assert abs(anchor - (now_wall - (m1 + m2) // 2)) <= slack
    # memory is read at its natural resolution (vm.stat_interval, 1 s): at least the first tick.
    mem_total = table.column("mem.total_bytes").drop_null().to_numpy()
    assert len(mem_total) >= 1 and np.all(mem_total == psutil.virtual_memory().total)
    rss = table.column("proc.rss_bytes").drop_null().to_numpy()
    assert len(rss) >= table.num_rows - 1
    assert abs(int(rss[-1]) - rss_now) < 16 << 20  # the last row is from ~1 ms after rss_now
    util = table.column("cpu.util_pct").drop_null().to_numpy()
    assert len(util) >= 1 and np.all((util >= 0) & (util <= 100)), util.max()


def test_monitored_process_exits_mid_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    s = Sampler(0.005, pid=child.pid, sources={"memory": None, "process": None})
    with s:
        child.wait()
        deadline = time.monotonic() + 30  # until the sampler saw it (not: until 0.2 s passed)
        while not s.stats().process_exited and time.monotonic() < deadline:
            time.sleep(0.01)
        still_running = s.stats().running
    st = s.stats()
    table = s.snapshot().to_arrow()
    rss = table.column("proc.rss_bytes").to_pylist()
    mem = table.column("mem.available_bytes").to_pylist()
    assert rss[0] is not None and rss[-1] is None  # process columns became null...
    assert all(v is not None for v in mem)  # ...system columns continued
    assert st.process_exited
    proc = next(src for src in st.sources if src.name == "process")
    # Every read after the exit failed and left its row null: the counts agree exactly.
    assert proc.reason == "process exited" and proc.failures == rss.count(None) >= 1
    assert still_running  # the sampler did not stop when the process went


def windows_closed(mono: np.ndarray[Any, Any], window_ns: int) -> list[int]:
    """Rows where a rate over at least ``window_ns`` is due: the first read only opens a window,
    and each later one closes it once ``window_ns`` has passed since it opened (worked out
    here from the rows' own timestamps, independently of the sources)."""
    due: list[int] = []
    opened = int(mono[0])
    for i in range(1, len(mono)):
        if int(mono[i]) - opened >= window_ns:
            due.append(i)
            opened = int(mono[i])
    return due


def ticked_fake_proc(
    tmp_path: Path, sources: list[str] | dict[str, float | None], steps: int, **kwargs: Any
) -> pa.Table:
    """Ticks on a recorded /proc whose counters advance by a known step after every tick; time
    passes between ticks (>= 10 ms each), so windows close, however loaded the machine is."""
    fake = FakeProc(tmp_path / "proc")
    s = Sampler(
        0.001,
        pid=PID,
        sources=sources,
        proc_root=str(fake.root),
        sys_root=str(DATA / "sys" / "basic"),
        **kwargs,
    )
    for _ in range(steps):
        s.tick_now(1)
        fake.advance(user=1, idle=3, sent=100, written_sectors=8, pid_utime=1)
        time.sleep(0.01)
    return s.snapshot().to_arrow()


def test_cpu_percent_uses_windows_of_at_least_cpu_window(tmp_path: Path) -> None:
    table = ticked_fake_proc(tmp_path, {"cpu": None, "process": None}, 30, cpu_window=0.05)
    mono = table.column("mono_ns").to_numpy()
    due = windows_closed(mono, 50_000_000)
    assert len(due) >= 3  # 30 steps of >= 10 ms: >= 0.29 s of windows of 50 ms + a step
    for name in ("cpu.util_pct", "proc.cpu_pct"):
        valid = table.column(name).is_valid().to_numpy(zero_copy_only=False)
        assert np.flatnonzero(valid).tolist() == due, name
    cpu = table.column("cpu.util_pct").to_pylist()
    proc = table.column("proc.cpu_pct").to_pylist()
    opened = 0
    for i in due:
        # Every step adds user 1, idle 3 (25 % busy) and 1 tick (10 ms) of the process's utime.
        assert cpu[i] == pytest.approx(25.0), i
        seconds = (int(mono[i]) - int(mono[opened])) / 1e9
        assert proc[i] == pytest.approx((i - opened) * 0.01 / seconds * 100), i
        opened = i


def test_cpu_window_zero_reads_every_tick() -> None:
    s = Sampler(0.002, sources=["process"], cpu_window=0)
    s.tick_now(5)
    assert s.snapshot().to_arrow().column("proc.cpu_pct").null_count == 1  # only the first read


def test_byte_rates_use_windows_of_at_least_rate_window(tmp_path: Path) -> None:
    # Read on every tick (by default the byte counters are read once per rate window + 5 %).
    table = ticked_fake_proc(tmp_path, {"network": None, "diskio": None}, 30, rate_window=0.05)
    mono = table.column("mono_ns").to_numpy()
    due = windows_closed(mono, 50_000_000)
    assert len(due) >= 3
    # Every step sends 100 bytes on eth0 and writes 8 sectors (4096 bytes) on vda.
    for name, per_step in (("net.sent_bytes_per_s", 100), ("disk.write_bytes_per_s", 4096)):
        valid = table.column(name).is_valid().to_numpy(zero_copy_only=False)
        assert np.flatnonzero(valid).tolist() == due, name
        values = table.column(name).to_pylist()
        opened = 0
        for i in due:
            seconds = (int(mono[i]) - int(mono[opened])) / 1e9
            assert values[i] == pytest.approx((i - opened) * per_step / seconds), (name, i)
            opened = i
    # Totals are still on every row: the bytes since the first read.
    assert table.column("net.sent_bytes").to_pylist() == [100 * i for i in range(30)]
    assert table.column("disk.write_bytes").to_pylist() == [4096 * i for i in range(30)]


# --- the rows part on its own (RingReader over a bare core) -----------------------------------


def test_the_ring_reader_copies_what_its_ticks_wrote(fake_proc: FakeProc) -> None:
    from _sampler_core import bare_core
    from stroboscope.sampling._frame import Frame
    from stroboscope.sampling._sampler_rows import RingReader

    core, plan = bare_core(fake_proc, {"memory": 1}, interval=0.01)
    rows = RingReader(core, interval=0.01, pid=PID, details=plan.details, ring_file=None)
    assert [c.name for c in rows.columns] == ["time", *[c["name"] for c in core.columns()]]
    assert rows.schema.names == [c.name for c in rows.columns]
    assert (rows.interval, rows.pid, rows.ring_file) == (0.01, PID, None)
    assert rows.tick(3) == 3
    assert rows.tick(2) == 2
    available = Frame(rows.snapshot()).to_arrow().column("mem.available_bytes").to_pylist()
    assert available == [24057104 * 1024] * 5  # MemAvailable of the recorded meminfo
    assert len(Frame(rows.drain()).to_arrow()) == 5
    assert len(Frame(rows.drain()).to_arrow()) == 0  # the cursor moved
    rows.tick(1)
    assert Frame(rows.copy_since(3)).to_arrow().num_rows == 3  # rows 3, 4 and 5
    stats = rows.stats(segments_written=7)
    assert (stats.rows_written, stats.interval_s, stats.pid) == (6, 0.01, PID)
    assert stats.segments_written == 7
    assert stats.source("memory").every == 1
    with pytest.raises(ValueError, match="n must be"):
        rows.tick(0)
    with pytest.raises(ValueError, match="first_row"):
        rows.copy_since(-1)
    core.start()
    try:
        with pytest.raises(RuntimeError, match="needs a stopped Sampler"):
            rows.tick(1)
    finally:
        core.stop()


def test_the_sampler_hands_its_rows_part_the_ring_it_reads(fake_proc: FakeProc) -> None:
    s = Sampler(0.01, sources={"memory": None}, proc_root=str(fake_proc.root), pid=PID)
    s.tick_now(4)
    assert s.snapshot().to_arrow().num_rows == 4
    assert s.columns == s._rows.columns and s.schema == s._rows.schema
    assert (s.interval, s.pid, s.ring_file) == (0.01, PID, None)
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.tick_now(1)
