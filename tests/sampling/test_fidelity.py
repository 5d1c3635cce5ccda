"""Fidelity at the millisecond: proc.cpu_pct against the CPU time the kernel gave a spinning
thread, and the natural-resolution defaults against the kernel facts they cite.

Timing-robust by construction: the expected value of each row comes from what the kernel says
the spinning thread got (its own ``time.thread_time_ns()`` log), not from wall-clock assumptions,
so a loaded machine that steals CPU from the spinner changes the expectation, not the verdict.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pytest
import stroboscope
from _paths import ROOT
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling._frame import Frame


def _spin_sleep(start: threading.Event, log: list[tuple[int, int]], cycles: int) -> None:
    """Spin 50 ms, sleep 50 ms, ``cycles`` times; log (monotonic ns, own CPU ns) as it goes."""
    start.wait()
    for _ in range(cycles):
        end = time.monotonic_ns() + 50_000_000
        while (now := time.monotonic_ns()) < end:
            log.append((now, time.thread_time_ns()))
        log.append((time.monotonic_ns(), time.thread_time_ns()))
        time.sleep(0.05)
        log.append((time.monotonic_ns(), time.thread_time_ns()))


def test_proc_cpu_pct_follows_a_spinning_thread_per_millisecond() -> None:
    log: list[tuple[int, int]] = []
    start = threading.Event()
    spinner = threading.Thread(target=_spin_sleep, args=(start, log, 10))
    spinner.start()  # before the sampler: its thread list is taken when it starts
    # Held against the whole process's CPU (os.times()), the sampler thread's included; every
    # row read on its tick (no overhead budget slowing the source).
    s = Sampler(
        0.001,
        sources=["process"],
        capacity=1 << 14,
        include_own_threads=True,
        max_overhead=None,
    )
    try:
        if "thread CPU clocks" not in s.stats().source("process").interface:
            pytest.skip("thread CPU clocks unavailable here: proc.cpu_pct uses a fallback")
        s.start()
        time.sleep(0.05)
        t0, cpu0 = time.monotonic_ns(), os.times()
        start.set()
        spinner.join()
        t1, cpu1 = time.monotonic_ns(), os.times()
        time.sleep(0.02)
        s.stop()
        st = s.stats()
    finally:
        s.close()
    table = s.snapshot().to_arrow()
    mono = np.asarray(table.column("mono_ns").to_numpy(), dtype=np.int64)
    pct = table.column("proc.cpu_pct").to_numpy(zero_copy_only=False).astype(float)
    inside = (mono > t0) & (mono <= t1) & ~np.isnan(pct)
    # Each row covers (previous row, this row]: the spinner's CPU over that span, from its log.
    log_t = np.array([t for t, _ in log], dtype=float)
    log_c = np.array([c for _, c in log], dtype=float)
    idx = np.nonzero(inside)[0]
    idx = idx[(idx >= 3) & (idx < len(mono) - 2)]

    def spinner_pct(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The spinner's CPU over (lo, hi] per wall time, from its own log (%)."""
        a, b = lo.astype(float), hi.astype(float)
        out: np.ndarray = 100 * (np.interp(b, log_t, log_c) - np.interp(a, log_t, log_c)) / (b - a)
        return out

    row_share = spinner_pct(mono[idx - 1], mono[idx])
    # A row is measured from the moment its clocks were read, a few µs (or, when the sampler
    # thread is preempted, a few hundred µs) after its tick: judge rows whose neighbourhood
    # (3 ticks either side) was steady, so that shift cannot change the expectation.
    around = spinner_pct(mono[idx - 3], mono[idx + 2])
    rows = pct[idx]
    # The process is the spinner plus the sampler thread (its CPU per tick, a few % when the
    # machine is loaded and caches are cold) plus a sleeping main thread.
    own = 100 * st.thread_cpu_ns / st.rows_written / 1_000_000
    busy = (row_share >= 95) & (around >= 95)  # the kernel ran the spinner throughout
    idle = (row_share <= 0.5) & (around <= 0.5)
    assert busy.sum() >= 20 or idle.sum() >= 100, (busy.sum(), idle.sum())
    if busy.sum() >= 20:  # on a loaded machine the spinner may rarely get a whole CPU
        ok = (rows[busy] >= 95) & (rows[busy] <= 100 + 2 * own + 3)
        assert np.mean(ok) >= 0.9, (own, np.percentile(rows[busy], [1, 5, 50, 95, 99]))
    if idle.sum() >= 20:
        ok = rows[idle] <= max(5.0, 2 * own + 3)
        assert np.mean(ok) >= 0.9, (own, np.percentile(rows[idle], [50, 90, 99]))
    span = (mono[idx] - mono[idx - 1]).astype(float)
    # The time-weighted mean over the second equals what os.times() says the process used.
    span = (mono[idx] - mono[idx - 1]).astype(float)
    row_cpu_s = float(np.sum(rows * span) / 100 / 1e9)
    covered_s = float(span.sum()) / 1e9
    times_cpu_s = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    wall_s = (t1 - t0) / 1e9
    # os.times() counts in USER_HZ ticks (10 ms): allow two of them beside the 2 %.
    assert row_cpu_s / covered_s == pytest.approx(times_cpu_s / wall_s, abs=0.02 + 0.02 / wall_s)


def test_default_every_is_the_natural_resolution_over_the_interval() -> None:
    s = Sampler(0.001, sources=["cpu", "memory", "disk", "process"], capacity=64)
    try:
        st = {x.name: x for x in s.stats().sources}
    finally:
        s.close()
    clk_tck = os.sysconf("SC_CLK_TCK")
    assert st["cpu"].resolution_ns == 1_000_000_000 // clk_tck
    stat_interval = Path("/proc/sys/vm/stat_interval")
    if stat_interval.exists():  # vm.stat_interval: seconds between per-CPU vmstat folds
        assert st["memory"].resolution_ns == int(stat_interval.read_text()) * 1_000_000_000
    assert st["disk"].resolution_ns == 1_000_000_000
    assert st["process"].resolution_ns == 0
    for x in st.values():
        assert x.every == max(1, math.ceil(x.resolution_ns / 1_000_000)), x
    # A rate given by the user wins over the resolution.
    forced = Sampler(0.001, sources={"memory": 0.002}, capacity=64)
    try:
        assert forced.stats().source("memory").every == 2
    finally:
        forced.close()


def test_available_sources_name_their_interface() -> None:
    info = {d["name"]: d for d in stroboscope.available_sources()}
    assert info["cpu"]["interface"] == "/proc/stat"
    assert info["network"]["interface"] in ("rtnetlink", "/proc/net/dev")
    assert info["diskio"]["interface"] in ("/sys/block/*/stat", "/proc/diskstats")
    for d in info.values():
        if d["available"]:
            assert isinstance(d["resolution_ns"], int) and d["resolution_ns"] >= 0
            assert d["resolution_reason"]
            # Every source states its kernel (or driver) fact and the interface it reads.
            assert not d["resolution_reason"].startswith("not declared"), d["name"]
            assert d["interface"], d["name"]
    # The GPU sources too, where only the fake libraries build them: docs/metrics.md is made
    # from every source of the registry (tests/test_docs.py keeps it current).
    docs = (ROOT / "docs" / "metrics.md").read_text()
    assert "| gpu | 10 ms |" in docs and "| amd_gpu | 10 ms |" in docs
    assert "not declared" not in docs
    # proc_tree counts each member's CPU time in USER_HZ ticks: no faster than the CPU source.
    assert info["proc_tree"]["resolution_ns"] == info["cpu"]["resolution_ns"]
    assert info["cgroup"]["resolution_ns"] == 0


def test_forward_fill_carries_the_last_value_and_keeps_leading_nulls() -> None:
    table = pa.table(
        {
            "mono_ns": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "mem.used_bytes": pa.array([None, 10, None, None, 12], pa.int64()),
            "cpu.util_pct": pa.array([1.5, None, 2.5, None, None], pa.float64()),
            "kind": pa.array(["a", None, "b", None, "c"]),
        }
    )
    filled = Frame(table).to_arrow(fill="forward")
    assert filled.column("mem.used_bytes").to_pylist() == [None, 10, 10, 10, 12]
    assert filled.column("cpu.util_pct").to_pylist() == [1.5, 1.5, 2.5, 2.5, 2.5]
    assert filled.column("kind").to_pylist() == ["a", None, "b", None, "c"]  # not a measurement
    assert Frame(table).to_arrow().column("mem.used_bytes").null_count == 3
    assert Frame(table).to_pandas(fill="forward")["mem.used_bytes"].tolist() == [
        pytest.approx(float("nan"), nan_ok=True),
        10,
        10,
        10,
        12,
    ]
    with pytest.raises(ValueError, match="fill must be None or 'forward'"):
        Frame(table).to_arrow(fill="backward")  # type: ignore[arg-type]


def test_forward_fill_on_a_sampler_frame_fills_rows_between_reads() -> None:
    s = Sampler(0.001, sources={"memory": 0.004, "process": None}, capacity=64)
    try:
        s.tick_now(9)
        raw = s.snapshot().to_arrow()
        filled = s.snapshot().to_arrow(fill="forward")
    finally:
        s.close()
    assert raw.column("mem.total_bytes").null_count == 6  # read on ticks 0, 4 and 8
    assert filled.column("mem.total_bytes").null_count == 0
    assert set(filled.column("mem.total_bytes").to_pylist()) == set(
        raw.column("mem.total_bytes").drop_null().to_pylist()
    )


def test_threads_source_names_the_busiest_thread() -> None:
    stop = threading.Event()
    spun: list[int] = []
    # The spinner's own CPU clock against CLOCK_MONOTONIC, noted every 0.5 ms it runs and once
    # more as it stops (it uses no CPU after that): what it got over any span, bracketed.
    clock: list[tuple[int, int]] = []

    def spin() -> None:
        spun.append(threading.get_native_id())
        noted = 0
        while not stop.is_set():
            now = time.monotonic_ns()
            if now - noted >= 500_000:
                clock.append((now, time.thread_time_ns()))
                noted = now
        clock.append((time.monotonic_ns(), time.thread_time_ns()))

    spinner = threading.Thread(target=spin)
    s = Sampler(0.01, sources=["threads"], cpu_window=0.1, capacity=256)
    try:
        assert s.stats().source("threads").interface == "/proc/<pid>/task/*/schedstat"
        assert s.stats().source("threads").every == 1  # 10 ms resolution, 10 ms interval
        spinner.start()
        s.start()
        t0 = time.monotonic_ns()
        time.sleep(0.6)
        stop.set()
        spinner.join()
        t1 = time.monotonic_ns()
        s.stop()
    finally:
        s.close()
    table = s.snapshot().to_arrow()
    mono = np.asarray(table.column("mono_ns").to_numpy())
    top = table.column("threads.top0.tid").to_numpy(zero_copy_only=False)
    pct = table.column("threads.top0.cpu_pct").to_numpy(zero_copy_only=False)
    total = table.column("threads.cpu_pct").to_numpy(zero_copy_only=False)
    inside = (mono > t0 + 150_000_000) & (mono < t1) & ~np.isnan(pct)
    assert inside.sum() >= 2
    # The spinner is the busiest thread in the windows it spun through (on a loaded machine it
    # may lose a window to a thread that got the CPU it was denied: most, not all).
    is_spinner = top[inside].astype(int) == spun[0]
    assert np.mean(is_spinner) >= 2 / 3, top[inside]
    # Its share over the windows, against what its own CPU clock said over the same span
    # (schedstat lags a running thread by at most one scheduler tick per window: a few %).
    # Windows are back to back: each runs from the previous window's row (or the first row,
    # the source's first reading) to its own row.
    ends = np.flatnonzero(~np.isnan(total))
    starts = np.concatenate(([0], ends[:-1]))[np.isin(ends, np.flatnonzero(inside))]
    span_start, span_end = int(mono[starts[0]]), int(mono[np.flatnonzero(inside)[-1]])
    widths = mono[np.flatnonzero(inside)] - mono[starts]
    mine = np.zeros(int(inside.sum()))  # the spinner's share in each window, from the top 4
    for k in range(4):
        tid = table.column(f"threads.top{k}.tid").to_numpy(zero_copy_only=False)[inside]
        share = table.column(f"threads.top{k}.cpu_pct").to_numpy(zero_copy_only=False)[inside]
        mine += np.where(tid == spun[0], np.nan_to_num(share), 0.0)
    ours = float(np.sum(mine * widths)) / (span_end - span_start)
    noted_at = np.array([m for m, _ in clock])
    cpu = np.array([c for _, c in clock])

    def cpu_at(t: int) -> tuple[int, int]:  # the spinner's CPU time at t: (at least, at most)
        before = int(np.searchsorted(noted_at, t, side="right")) - 1
        after = min(int(np.searchsorted(noted_at, t, side="left")), len(cpu) - 1)
        return (int(cpu[before]) if before >= 0 else 0), int(cpu[after])

    (lo0, hi0), (lo1, hi1) = cpu_at(span_start), cpu_at(span_end)
    span = span_end - span_start
    own_low, own_high = 100 * (lo1 - hi0) / span, 100 * (hi1 - lo0) / span
    assert own_low - 15 <= ours <= own_high + 15, (own_low, ours, own_high)
    assert np.all(total[inside] >= pct[inside] - 1e-9)


def test_forward_fill_leaves_a_failed_read_null() -> None:
    # A source read every 4 ticks of 1 ms: rows less than 3.5 ms after its value are "not due";
    # a null at its next read (4 ms on) is a failure and stays null, with the rows after it.
    mono = [0, 1, 2, 3, 4, 5, 6, 8, 9]
    table = pa.table(
        {
            "mono_ns": pa.array([m * 1_000_000 for m in mono], pa.int64()),
            "mem.used_bytes": pa.array(
                [7, None, None, None, None, None, None, 9, None], pa.int64()
            ),
        }
    )
    frame = Frame(table, fill_within_ns={"mem.used_bytes": 3_500_000})
    filled = frame.to_arrow(fill="forward").column("mem.used_bytes").to_pylist()
    assert filled == [7, 7, 7, 7, None, None, None, 9, 9]
    # Without the sampler's periods (a recovered table) every null after a value is filled.
    assert Frame(table).to_arrow(fill="forward").column("mem.used_bytes").to_pylist() == [
        7,
        7,
        7,
        7,
        7,
        7,
        7,
        9,
        9,
    ]


def test_many_threads_fall_back_to_the_process_clock() -> None:
    # Past 64 threads one clock read per thread per tick is no longer cheap: the process clock.
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait) for _ in range(70)]
    for t in idle:
        t.start()
    try:
        s = Sampler(0.001, sources=["process"], capacity=64)
        try:
            assert s.stats().source("process").interface == "clock_getcpuclockid"
        finally:
            s.close()
    finally:
        stop.set()
        for t in idle:
            t.join()


def test_another_process_is_read_through_its_process_clock() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        s = Sampler(0.01, pid=child.pid, sources=["process"], cpu_window=0.1, capacity=256)
        proc = psutil.Process(child.pid)
        try:
            assert s.stats().source("process").interface == "clock_getcpuclockid"
            time.sleep(0.2)  # past the interpreter's start
            # psutil reads the child's /proc/PID/stat on both sides of each tick: the CPU time
            # between the sampler's two reads is bracketed by [inner delta, outer delta].
            c_first = proc.cpu_times()
            s.tick_now(1)
            c0 = proc.cpu_times()
            time.sleep(0.4)
            c1 = proc.cpu_times()
            s.tick_now(1)
            c_last = proc.cpu_times()
            table = s.snapshot().to_arrow()
        finally:
            s.close()
    finally:
        child.kill()
        child.wait()
    pct = table.column("proc.cpu_pct").to_pylist()
    mono = table.column("mono_ns").to_pylist()
    assert pct[0] is None and pct[1] is not None and 0 <= pct[1] <= 100 + 1e-9
    # What the kernel says the child got (psutil: USER_HZ ticks, 10 ms each) over spans inside
    # and around the sampler's two reads, per second between the rows' own times; /proc
    # truncates utime and stime each to a tick, so a sum of the two can read up to two short.
    seconds = (mono[1] - mono[0]) / 1e9
    inner = (c1.user + c1.system) - (c0.user + c0.system)
    outer = (c_last.user + c_last.system) - (c_first.user + c_first.system)
    slack = 2 * 0.01
    assert 100 * (inner - slack) / seconds <= pct[1] <= 100 * (outer + slack) / seconds
