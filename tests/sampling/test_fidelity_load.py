"""Every row at 1 kHz on a machine whose cores are all busy (one spinner process per core):
proc.cpu_pct of a spinning thread, PSI shares, and the rows of a process that exits.

On a loaded machine the sampler thread is preempted between the clocks it reads and the stamps
it takes; a row must still stay within what the threads that ran could use, and the mean must
agree with ``os.times()`` read around the run. References: the spinning thread's own log of its
CPU clock, the sampler thread's CPU clock read from Python, ``os.times()``, and ``/proc`` read
from Python.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from stroboscope.sampling import CoreSampler as Sampler


@contextlib.contextmanager
def _all_cores_busy(extra: int = 0) -> Iterator[None]:
    """One spinning process per online CPU (at least two), plus ``extra``, for the duration."""
    n = max(2, os.cpu_count() or 2) + extra
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.2)  # let them reach their loops
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _thread_clock(tid: int) -> int:
    """The clockid of thread ``tid``'s CPU clock (include/linux/posix-timers.h)."""
    return (~tid << 3) | 6


def test_proc_cpu_pct_of_a_spinning_thread_under_load() -> None:
    before = set(os.listdir("/proc/self/task"))
    # The rows are held against the whole process's CPU (os.times()), the sampler thread's
    # included; every row read on its tick (no overhead budget slowing the source).
    s = Sampler(
        0.001,
        sources=["process"],
        capacity=1 << 13,
        include_own_threads=True,
        max_overhead=None,
    )
    try:
        if "thread CPU clocks" not in s.stats().source("process").interface:
            pytest.skip("thread CPU clocks unavailable here: proc.cpu_pct uses a fallback")
        s.start()
        new = sorted(set(os.listdir("/proc/self/task")) - before)
        assert len(new) == 1, new  # the sampler thread
        sampler_clock = _thread_clock(int(new[0]))
        # The spinner logs (monotonic ns, its own CPU ns, the sampler thread's CPU ns) as it spins.
        log: list[tuple[int, int, int]] = []
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                log.append(
                    (
                        time.monotonic_ns(),
                        time.thread_time_ns(),
                        time.clock_gettime_ns(sampler_clock),
                    )
                )

        with _all_cores_busy():
            spinner = threading.Thread(target=spin)
            spinner.start()  # the main thread then waits in join(): its clock does not move
            time.sleep(0.05)
            t0, cpu0 = time.monotonic_ns(), os.times()
            time.sleep(1.0)
            t1, cpu1 = time.monotonic_ns(), os.times()
            stop.set()
            spinner.join()
        s.stop()
    finally:
        s.close()
    table = s.snapshot().to_arrow()
    mono = np.asarray(table.column("mono_ns").to_numpy(), dtype=np.int64)
    pct = table.column("proc.cpu_pct").to_numpy(zero_copy_only=False).astype(float)
    log_t = np.array([t for t, _, _ in log], dtype=float)
    spin_c = np.array([c for _, c, _ in log], dtype=float)
    samp_c = np.array([c for _, _, c in log], dtype=float)
    idx = np.nonzero((mono > t0) & (mono <= t1) & ~np.isnan(pct))[0]
    idx = idx[(idx >= 2) & (idx < len(mono) - 1)]
    assert len(idx) >= 200, len(idx)  # a loaded machine still takes most ticks
    rows = pct[idx]
    # The bound every row keeps: the spinner and the sampler thread ran, each at most 100 %.
    assert np.all(rows <= 200.0), np.max(rows)
    # The spinner's share of a row is at most 100 %; the sampler thread's is its CPU time between
    # its clock reads in the row's two ticks, which lie within (tick i-2, tick i+1], over at
    # least half the row's gap (a read late by up to half a gap). Nothing else is allowed over.
    gap = (mono[idx] - mono[idx - 1]).astype(float)
    sampler_ns = np.interp(mono[idx + 1], log_t, samp_c) - np.interp(mono[idx - 2], log_t, samp_c)
    own = 100.0 * sampler_ns / (0.5 * gap)
    regular = (gap > 0.5e6) & (gap < 1.5e6)  # the row's two reads were one tick apart
    assert regular.sum() >= 100, regular.sum()
    over = rows[regular] > 100.0 + own[regular]
    assert not np.any(over), (rows[regular][over], own[regular][over])
    # The spinner was busy throughout: its own log says it got CPU (how much depends on the load
    # around it), so the rows above include ones in which it ran.
    spin_share = (np.interp(t1, log_t, spin_c) - np.interp(t0, log_t, spin_c)) / (t1 - t0)
    assert spin_share > 0.02, spin_share
    # The time-weighted mean equals what os.times() says the process used over the run (rows
    # cover their gap; os.times() counts in 10 ms ticks: two of them beside 3 %).
    row_cpu_s = float(np.sum(rows * gap) / 100 / 1e9)
    covered_s = float(gap.sum()) / 1e9
    times_cpu_s = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    wall_s = (t1 - t0) / 1e9
    assert row_cpu_s / covered_s == pytest.approx(times_cpu_s / wall_s, abs=0.03 + 0.02 / wall_s)


def test_pressure_share_never_exceeds_100_under_load() -> None:
    if not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("no /proc/pressure here")
    with _all_cores_busy(extra=1):  # more spinners than CPUs: one always waits
        # every row read on its tick (no overhead budget slowing the source)
        s = Sampler(0.001, sources={"pressure": 0.001}, capacity=1 << 12, max_overhead=None)
        try:
            if not s.stats().source("pressure").interface:
                pytest.skip("pressure source unavailable")
            with open("/proc/pressure/cpu") as f:
                total0 = int(f.readline().split("total=")[1])
            w0 = time.monotonic_ns()
            s.start()
            time.sleep(1.5)
            s.stop()
            with open("/proc/pressure/cpu") as f:
                total1 = int(f.readline().split("total=")[1])
            w1 = time.monotonic_ns()
        finally:
            s.close()
    table = s.snapshot().to_arrow()
    mono = np.asarray(table.column("mono_ns").to_numpy(), dtype=np.int64)
    cells = table.column("psi.cpu.some_pct").to_numpy(zero_copy_only=False).astype(float)
    have = ~np.isnan(cells)
    assert len(mono) >= 500
    values = cells[have]
    # One value per 100 ms window, never between (a read is a collection that loses the stall
    # time of a sub-jiffy interval for every reader), never above 100.
    assert 8 <= len(values) <= 16, len(values)
    # (a window closes on the tick due at its end; row times are wake-up times, which this load
    # delays by up to a few ms, so a gap between rows can be that much short of 100 ms: still
    # tens of jiffies)
    assert np.all(np.diff(mono[have]) >= 90_000_000), np.diff(mono[have])
    assert np.all((values >= 0) & (values <= 100.0)), values
    # The windows tell what the kernel's own total says over the run, read around it from Python
    # (they cover all but up to a window at each end). With more spinners than CPUs that is near
    # 100 %; other readers of the file on this machine can only make both lose stall time.
    around = 100 * (total1 - total0) * 1e3 / (w1 - w0)
    assert around <= 100.5
    assert float(np.mean(values)) == pytest.approx(around, abs=15.0), (values, around)


def test_rows_of_a_process_that_exits_are_null_never_zero() -> None:
    # A child that touches 200 MB, so freeing its address space in do_exit() takes long enough
    # for several 1 ms ticks to see it exiting (statm reads zeros while stat still says 'R').
    code = "x = bytearray(200_000_000)\nimport time\ntime.sleep(0.2)\n"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        s = Sampler(0.001, pid=child.pid, sources={"process": 0.001}, capacity=1 << 12)
        try:
            s.start()
            # Wait for the exit without reaping: the zombie stays readable for the sampler.
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            time.sleep(0.05)
            s.stop()
        finally:
            s.close()
    finally:
        child.wait()
    table = s.snapshot().to_arrow()
    rss = table.column("proc.rss_bytes").to_numpy(zero_copy_only=False).astype(float)
    mem = table.column("proc.mem_pct").to_numpy(zero_copy_only=False).astype(float)
    threads = table.column("proc.threads").to_numpy(zero_copy_only=False).astype(float)
    alive = ~np.isnan(rss)
    assert alive.sum() >= 50 and (~alive).sum() >= 20, (alive.sum(), (~alive).sum())
    # Alive rows hold the memory it had; once gone, every proc.* cell of the row is null, and it
    # stays so (a gone process does not come back).
    assert np.all(rss[alive] > 0) and np.all(mem[alive] > 0), np.min(rss[alive])
    first_gone = int(np.argmax(~alive))
    assert not alive[first_gone:].any()
    assert np.isnan(mem[first_gone:]).all() and np.isnan(threads[first_gone:]).all()
    assert s.stats().source("process").reason == "process exited"
