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


def test_process_io_and_context_switches() -> None:
    me = psutil.Process()
    s = Sampler(0.01, sources=["process_io"])
    s.tick_now(1)
    io0, ctx0 = me.io_counters(), me.num_ctx_switches()
    for _ in range(200):
        time.sleep(0)  # voluntary switches
        os.sched_yield()
    time.sleep(0.01)
    io1, ctx1 = me.io_counters(), me.num_ctx_switches()
    s.tick_now(1)
    row = last_row(s)
    # Since-start counters: our delta must cover psutil's delta measured inside our interval.
    assert row["proc.ctx_voluntary"] >= ctx1.voluntary - ctx0.voluntary
    assert row["proc.ctx_voluntary"] <= ctx1.voluntary - ctx0.voluntary + 50
    assert row["proc.read_bytes"] is not None and row["proc.read_bytes"] >= 0
    assert row["proc.write_bytes"] >= io1.write_bytes - io0.write_bytes


def test_process_cpu_percent_of_a_busy_child() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"]
    )
    try:
        time.sleep(0.2)  # past interpreter start-up
        s = Sampler(0.01, pid=child.pid, sources=["process"])
        with s:
            time.sleep(0.8)
        cpu = [
            v for v in s.snapshot().to_arrow().column("proc.cpu_pct").to_pylist() if v is not None
        ]
    finally:
        child.wait()
    # A spinning child uses one core: ~100 %. Values come every cpu_window (0.1 s); the machine is
    # shared, so allow for stolen time.
    assert 4 <= len(cpu) <= 9
    assert 60.0 < sum(cpu) / len(cpu) < 110.0


def test_system_cpu_percent_matches_psutil_over_busy_interval() -> None:
    psutil.cpu_percent(None)
    s = Sampler(0.05, sources=["cpu"])
    s.tick_now(1)
    t_end = time.monotonic() + 0.5
    while time.monotonic() < t_end:
        pass
    s.tick_now(1)
    ref = psutil.cpu_percent(None)
    ours = last_row(s)["cpu.util_pct"]
    assert ours == pytest.approx(ref, abs=10.0)
    assert ours > 100.0 / (psutil.cpu_count() or 1) * 0.6  # our busy loop alone is one core


def _nic_totals() -> tuple[int, int]:
    c = psutil.net_io_counters(pernic=True)
    sent = sum(v.bytes_sent for k, v in c.items() if k != "lo")
    recv = sum(v.bytes_recv for k, v in c.items() if k != "lo")
    return sent, recv


def test_network_counters_match_psutil_deltas() -> None:
    s = Sampler(0.01, sources=["network"])
    s.tick_now(1)
    sent0, recv0 = _nic_totals()
    time.sleep(0.3)
    sent1, recv1 = _nic_totals()
    s.tick_now(1)
    row = last_row(s)
    # Our window contains psutil's; other traffic in the gaps is small.
    assert sent1 - sent0 <= row["net.sent_bytes"] <= sent1 - sent0 + 256 * 1024
    assert recv1 - recv0 <= row["net.recv_bytes"] <= recv1 - recv0 + 256 * 1024
    assert row["net.sent_bytes_per_s"] >= 0


def test_disk_usage_matches_psutil(tmp_path: Path) -> None:
    row = sample_now(["disk"], disk_paths=["/", str(tmp_path)])
    du = psutil.disk_usage("/")
    assert row["disk.used_pct"] == pytest.approx(du.percent, abs=0.2)
    assert abs(row["disk.free_bytes"] - du.free) < 64 * MiB
    assert row["disk.total_bytes"] == du.total
    prefix = "disk." + str(tmp_path).strip("/").replace("/", "_").replace("-", "_").lower()
    tmp_du = psutil.disk_usage(str(tmp_path))
    assert row[prefix + ".total_bytes"] == tmp_du.total


def test_disk_io_counts_a_written_file(tmp_path: Path) -> None:
    s = Sampler(0.01, sources=["diskio"])
    s.tick_now(1)
    before = psutil.disk_io_counters()
    with open(tmp_path / "blob", "wb") as f:
        f.write(os.urandom(16 * MiB))
        f.flush()
        os.fsync(f.fileno())
    time.sleep(0.1)
    after = psutil.disk_io_counters()
    s.tick_now(1)
    row = last_row(s)
    ref = after.write_bytes - before.write_bytes
    if ref < 8 * MiB:
        pytest.skip(f"{tmp_path} is not backed by a block device psutil sees (wrote {ref} bytes)")
    assert ref <= row["disk.write_bytes"] <= ref + 8 * MiB
