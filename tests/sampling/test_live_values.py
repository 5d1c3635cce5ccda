"""Live values cross-checked against psutil and /proc read from Python at the same moment.

Tolerances are stated per test: the two readings are microseconds to milliseconds apart on a
shared machine, so level values may move a little between them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from stroboscope import Sampler

MiB = 1 << 20


def last_row(sampler: Sampler) -> dict[str, Any]:
    table = sampler.snapshot().to_arrow()
    assert table.num_rows > 0
    return {name: table.column(name)[-1].as_py() for name in table.column_names}


def sample_now(sources: list[str], **kwargs: Any) -> dict[str, Any]:
    s = Sampler(0.01, sources=sources, **kwargs)
    s.tick_now(1)
    return last_row(s)


def test_memory_matches_psutil() -> None:
    row = sample_now(["memory"])
    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    assert row["mem.total_bytes"] == vm.total  # exact: MemTotal does not move
    assert abs(row["mem.available_bytes"] - vm.available) < 0.02 * vm.total
    assert row["mem.used_bytes"] == row["mem.total_bytes"] - row["mem.available_bytes"]
    assert row["mem.util_pct"] == pytest.approx(vm.percent, abs=2.0)
    assert abs(row["mem.swap_used_bytes"] - sw.used) < 0.02 * max(sw.total, 1) + MiB


def test_process_rss_threads_and_memory_percent() -> None:
    me = psutil.Process()
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        row = sample_now(["process"])
        rss = me.memory_info().rss
        assert abs(row["proc.rss_bytes"] - rss) < 8 * MiB  # same page, ms apart
        assert row["proc.threads"] == me.num_threads()
        assert row["proc.mem_pct"] == pytest.approx(me.memory_percent(), abs=0.1)
        blob = bytearray(128 * MiB)  # touch 128 MiB: RSS must follow
        for i in range(0, len(blob), 4096):
            blob[i] = 1
        row2 = sample_now(["process"])
        assert 0.9 * 128 * MiB < row2["proc.rss_bytes"] - row["proc.rss_bytes"] < 1.1 * 128 * MiB
        del blob
    finally:
        stop.set()
        for w in workers:
            w.join()


def test_process_io_and_context_switches(tmp_path: Path) -> None:
    me = psutil.Process()
    s = Sampler(0.01, sources=["process_io"])
    # psutil reads /proc/self/io and /proc/self/status on both sides of each tick: since-start
    # counters are bracketed exactly by [inner delta, outer delta].
    io0, ctx0 = me.io_counters(), me.num_ctx_switches()
    s.tick_now(1)
    io1, ctx1 = me.io_counters(), me.num_ctx_switches()
    for _ in range(200):
        time.sleep(0.0001)  # each real sleep blocks: one voluntary switch at least
    blob = tmp_path / "blob"
    with open(blob, "wb") as f:
        f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(blob, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # so the read below hits storage
        while os.read(fd, 1 << 16):
            pass
    finally:
        os.close(fd)
    io2, ctx2 = me.io_counters(), me.num_ctx_switches()
    s.tick_now(1)
    io3, ctx3 = me.io_counters(), me.num_ctx_switches()
    row = last_row(s)
    for column, field in (
        ("proc.read_bytes", "read_bytes"),
        ("proc.write_bytes", "write_bytes"),
    ):
        inner = getattr(io2, field) - getattr(io1, field)
        outer = getattr(io3, field) - getattr(io0, field)
        assert inner <= row[column] <= outer, column
    inner = ctx2.voluntary - ctx1.voluntary
    assert inner >= 200  # the sleeps above
    assert inner <= row["proc.ctx_voluntary"] <= ctx3.voluntary - ctx0.voluntary


def test_process_cpu_percent_of_a_busy_child() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<60: pass"]
    )
    try:
        me = psutil.Process(child.pid)
        s = Sampler(0.01, pid=child.pid, sources=["process"], cpu_window=0)
        # psutil reads the child's /proc/PID/stat on both sides of each tick, so the CPU time
        # between our two reads is bracketed; divided by the interval between the rows' own
        # timestamps, so is our percentage (± one 10 ms tick of /proc's resolution per read).
        c0 = sum(me.cpu_times()[:2])
        s.tick_now(1)
        c1 = sum(me.cpu_times()[:2])
        time.sleep(0.5)
        c2 = sum(me.cpu_times()[:2])
        s.tick_now(1)
        c3 = sum(me.cpu_times()[:2])
    finally:
        child.kill()
        child.wait()
    table = s.snapshot().to_arrow()
    mono = table.column("mono_ns").to_pylist()
    pct = table.column("proc.cpu_pct").to_pylist()
    seconds = (mono[1] - mono[0]) / 1e9
    assert pct[0] is None  # no previous reading
    assert c2 - c1 > 0.05  # the child did spin between our reads
    # /proc reports utime and stime each truncated to 10 ms ticks, so a sum of the two can read
    # up to two ticks short; our value is from the nanosecond CPU clock.
    slack = 2 * 0.01
    assert (c2 - c1 - slack) / seconds * 100 <= pct[1] <= (c3 - c0 + slack) / seconds * 100


def _cpu_busy_total() -> tuple[float, float]:
    """All cores' busy and total CPU seconds from /proc/stat, as psutil and the cpu source count
    them: total = user + nice + system + idle + iowait + irq + softirq + steal (guest time is
    inside user and nice), busy = total - idle - iowait."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    return busy, busy + t.idle + t.iowait


def test_system_cpu_percent_matches_psutil_over_busy_interval() -> None:
    s = Sampler(0.05, sources=["cpu"])
    # psutil reads /proc/stat on both sides of each tick: the busy and total time between our
    # two reads are bracketed by [inner delta, outer delta], so our share is bracketed by
    # [inner busy / outer total, outer busy / inner total].
    b0, t0 = _cpu_busy_total()
    s.tick_now(1)
    b1, t1 = _cpu_busy_total()
    t_end = time.monotonic() + 0.5
    while time.monotonic() < t_end:
        pass
    b2, t2 = _cpu_busy_total()
    s.tick_now(1)
    b3, t3 = _cpu_busy_total()
    ours = last_row(s)["cpu.util_pct"]
    # 1 point of slack: iowait can go backwards by a tick (the source counts that as 0), and
    # psutil's seconds are sums of floats.
    assert 100 * (b2 - b1) / (t3 - t0) - 1.0 <= ours <= 100 * (b3 - b0) / (t2 - t1) + 1.0
    assert ours > 100.0 / (psutil.cpu_count() or 1) * 0.6  # our busy loop alone is one core


def _nic_totals() -> tuple[int, int]:
    c = psutil.net_io_counters(pernic=True)
    sent = sum(v.bytes_sent for k, v in c.items() if k != "lo")
    recv = sum(v.bytes_recv for k, v in c.items() if k != "lo")
    return sent, recv


def test_network_counters_match_psutil_deltas() -> None:
    # Read on both ticks (by default once per rate window + 5 %).
    s = Sampler(0.01, sources={"network": None})
    # psutil reads the same kernel counters on both sides of each tick: since-start bytes are
    # bracketed exactly by [inner delta, outer delta], whatever other traffic there is.
    sent0, recv0 = _nic_totals()
    s.tick_now(1)
    sent1, recv1 = _nic_totals()
    time.sleep(0.3)  # a window of more than rate_window (0.1 s) between the two rows
    sent2, recv2 = _nic_totals()
    s.tick_now(1)
    sent3, recv3 = _nic_totals()
    row = last_row(s)
    assert sent2 - sent1 <= row["net.sent_bytes"] <= sent3 - sent0
    assert recv2 - recv1 <= row["net.recv_bytes"] <= recv3 - recv0
    # The rate over a window of >= rate_window (0.1 s) is the bytes over the rows' own interval.
    mono = s.snapshot().to_arrow().column("mono_ns").to_pylist()
    seconds = (mono[1] - mono[0]) / 1e9
    assert row["net.sent_bytes_per_s"] == pytest.approx(row["net.sent_bytes"] / seconds)
    assert row["net.recv_bytes_per_s"] == pytest.approx(row["net.recv_bytes"] / seconds)


def test_disk_usage_matches_psutil(tmp_path: Path) -> None:
    s = Sampler(0.01, sources=["disk"], disk_paths=["/", str(tmp_path)])
    # psutil reads statvfs just before and just after the tick: free space moving meanwhile
    # (other writers on a shared machine) moves both references with it.
    before = psutil.disk_usage("/")
    s.tick_now(1)
    after = psutil.disk_usage("/")
    row = last_row(s)
    pcts = (before.percent, after.percent)  # psutil rounds to 0.1
    assert min(pcts) - 0.2 <= row["disk.used_pct"] <= max(pcts) + 0.2
    free = (before.free, after.free)
    assert min(free) - 64 * MiB < row["disk.free_bytes"] < max(free) + 64 * MiB
    assert row["disk.total_bytes"] == after.total
    prefix = "disk." + str(tmp_path).strip("/").replace("/", "_").replace("-", "_").lower()
    tmp_du = psutil.disk_usage(str(tmp_path))
    assert row[prefix + ".total_bytes"] == tmp_du.total


def test_disk_io_counts_a_written_file(tmp_path: Path) -> None:
    # Read on both ticks (by default once per rate window + 5 %).
    s = Sampler(0.01, sources={"diskio": None})
    # psutil reads the same whole-device counters on both sides of each tick: the bytes between
    # our two reads are bracketed exactly by [inner delta, outer delta], whatever else writes.
    first = psutil.disk_io_counters()
    s.tick_now(1)
    before = psutil.disk_io_counters()
    with open(tmp_path / "blob", "wb") as f:
        f.write(os.urandom(16 * MiB))
        f.flush()
        os.fsync(f.fileno())
    time.sleep(0.1)
    after = psutil.disk_io_counters()
    s.tick_now(1)
    last = psutil.disk_io_counters()
    row = last_row(s)
    ref = after.write_bytes - before.write_bytes
    if ref < 8 * MiB:
        pytest.skip(f"{tmp_path} is not backed by a block device psutil sees (wrote {ref} bytes)")
    assert ref <= row["disk.write_bytes"] <= last.write_bytes - first.write_bytes
