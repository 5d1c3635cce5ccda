"""The drop-in SystemMonitor: its exact surface and keys, values against psutil, GPU keys from the
fake NVML, the crash-safe dump (its windows: test_windows.py).

Tolerances are stated per test: psutil reads the same /proc files a few milliseconds after the
monitor's window closed, so level values may move a little between the two.
"""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

import psutil
import pyarrow.csv as pa_csv
import pytest
from _fake_nvml import ScriptFn
from _monitor import GPU_AVAILABLE, MiB, Recorder, check_keys, monitor, wait_rows
from stroboscope.compat import SystemMonitor
from stroboscope.senders import AbstractBackendSender, StatsDict


def test_top_level_import() -> None:
    from stroboscope.compat.scaffold import SystemMonitor as Mon
    from stroboscope.senders import AbstractBackendSender as Abs

    assert Mon is SystemMonitor and Abs is AbstractBackendSender


def test_compatible_signature_and_types() -> None:
    params = list(inspect.signature(SystemMonitor).parameters.values())
    assert [p.name for p in params[:4]] == ["pid", "backend_sender", "sample_rate_seconds", "rank"]
    assert params[2].default == 2 and params[3].default is None
    assert all(p.kind is p.KEYWORD_ONLY for p in params[4:])
    assert inspect.isabstract(AbstractBackendSender)
    assert getattr(AbstractBackendSender.publish, "__isabstractmethod__", False)
    with pytest.raises(TypeError):
        AbstractBackendSender()  # type: ignore[abstract]
    from stroboscope.senders import GPUHandle, SamplerDict

    assert SamplerDict == typing.Dict[str, typing.List[float]]  # noqa: UP006 - the alias itself
    assert StatsDict == typing.Dict[str, float]  # noqa: UP006 - the alias itself
    assert GPUHandle is object


@pytest.mark.parametrize("rank", [None, 3])
def test_exact_key_set(rank: int | None) -> None:
    rec = Recorder()
    mon = monitor(rec, rank=rank)
    assert mon.gpu_count == 0 if not GPU_AVAILABLE else mon.gpu_count >= 1
    mon.start()
    try:
        wait_rows(mon, 50)  # every source has produced a value well before this
        mon.flush()
    finally:
        mon.shutdown()
    prefix = f"rank{rank}." if rank is not None else ""
    assert len(rec.events) == 2  # flush() and shutdown(); the 60 s period never came
    for event in rec.events:
        check_keys(event, prefix, mon.gpu_count)
    check_keys(mon.sampler, prefix, mon.gpu_count)
    assert rec.closed == 1


def test_network_init_at_construction() -> None:
    before = psutil.net_io_counters()
    mon = monitor(Recorder())
    after = psutil.net_io_counters()
    mon.shutdown()
    assert mon.network_init is not None and set(mon.network_init) == {"sent", "recv"}
    # Both count every interface, loopback included.
    assert before.bytes_sent <= mon.network_init["sent"] <= after.bytes_sent
    assert before.bytes_recv <= mon.network_init["recv"] <= after.bytes_recv


def test_values_match_psutil() -> None:
    rec = Recorder()
    mon = monitor(rec, aggregate="last")
    mon.start()
    try:
        wait_rows(mon, 30)
        mon.flush()
        me = psutil.Process()
        vm = psutil.virtual_memory()
        rss = me.memory_info().rss
        threads = me.num_threads()
        mem_pct = me.memory_percent()
        disk = psutil.disk_usage("/").percent
    finally:
        mon.shutdown()
    ev = rec.events[0]
    assert ev["memory"] == pytest.approx(vm.percent, abs=1.0)
    assert ev["proc.memory.availableMB"] == pytest.approx(vm.available / MiB, rel=0.02)
    assert ev["disk"] == pytest.approx(disk, abs=0.1)
    assert ev["proc.memory.rssMB"] == pytest.approx(rss / MiB, abs=8.0)
    assert ev["proc.memory.percent"] == pytest.approx(mem_pct, abs=0.05)
    assert ev["proc.cpu.threads"] == threads
    assert isinstance(ev["proc.cpu.threads"], int)
    assert mon.proc.pid == os.getpid()


def test_cpu_mean_matches_psutil_over_the_same_window() -> None:
    rec = Recorder()
    mon = monitor(rec, aggregate="mean")
    mon.start()
    try:
        wait_rows(mon, 20)
        mon.flush()  # the window starts here ...
        psutil.cpu_percent()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:  # keep one core busy through the window
            sum(range(1000))
        mon.flush()  # ... and ends here
        reference = psutil.cpu_percent()
    finally:
        mon.shutdown()
    # psutil: busy share of the /proc/stat deltas over the window; the monitor: the mean of its
    # 10 ms readings over the same window. Both see this process's busy core. The readings at
    # the window's edges may reach a little before it (the sampler's CPU % smooths over a short
    # window), so allow 10 points on a 2 s window.
    assert rec.events[1]["cpu"] == pytest.approx(reference, abs=10.0)
    assert rec.events[1]["cpu"] >= 100.0 / os.cpu_count() * 0.5  # type: ignore[operator]


def _loopback_traffic(nbytes: int) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    received = 0

    def reader() -> None:
        nonlocal received
        while received < nbytes:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            received += len(chunk)

    t = threading.Thread(target=reader)
    t.start()
    client.sendall(b"x" * nbytes)
    t.join(10)
    for s in (client, conn, server):
        s.close()
    assert received == nbytes


def test_network_grows_with_loopback_traffic() -> None:
    rec = Recorder()
    mon = monitor(rec, aggregate="last")
    mon.start()
    try:
        wait_rows(mon, 10)
        mon.flush()
        first = dict(rec.events[0]["network"])
        _loopback_traffic(5_000_000)
        wait_rows(mon, mon.raw_sampler.stats().rows_written + 2)  # a row after the traffic
        mon.flush()
        counters = psutil.net_io_counters()
        second = dict(rec.events[1]["network"])
    finally:
        mon.shutdown()
    assert mon.network_init is not None
    for direction in ("sent", "recv"):
        grew = second[direction] - first[direction]
        assert grew >= 5_000_000, (direction, grew)
        assert grew < 5_000_000 + 2_000_000  # TCP/IP headers and other traffic only
    # Since construction, as psutil counts it (a little other traffic may come between).
    assert second["sent"] == pytest.approx(
        counters.bytes_sent - mon.network_init["sent"], abs=256 * 1024
    )
    assert second["recv"] == pytest.approx(
        counters.bytes_recv - mon.network_init["recv"], abs=256 * 1024
    )


def test_periodic_publishing_and_start_twice() -> None:
    rec = Recorder()
    mon = monitor(rec, rate=0.2)
    mon.start()
    mon.start()  # harmless: one publishing thread, one sampler thread
    try:
        names = [t.name for t in threading.enumerate()]
        assert names.count("stroboscope-monitor") == 1
        rec.wait_for(3, timeout=10)
    finally:
        mon.shutdown()
    mon.shutdown()  # a second shutdown does nothing
    assert not mon.raw_sampler.running
    assert rec.closed == 1
    assert "stroboscope-monitor" not in [t.name for t in threading.enumerate()]
    with pytest.raises(RuntimeError, match="shut down"):
        mon.start()


def test_flush_and_shutdown_publish() -> None:
    rec = Recorder()
    mon = monitor(rec)
    mon.flush()  # before start: the (empty) sampler dict is published, as the originals do
    assert rec.events == [{}]
    mon.start()
    wait_rows(mon, 20)
    mon.flush()
    assert len(rec.events) == 2 and "cpu" in rec.events[1]
    assert rec.events[1] == mon.sampler
    mon.shutdown()
    assert len(rec.events) == 3 and "cpu" in rec.events[2]


class _StopsOnFirst(Recorder):
    """A sender that shuts its monitor down, and flushes it, from inside ``publish``."""

    monitor: SystemMonitor

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        super().publish(event)
        if len(self.events) == 1:
            t0 = time.monotonic()
            self.monitor.flush()  # its own event cannot be taken while it runs: no wait
            self.monitor.shutdown()
            self.waited = time.monotonic() - t0

    def close(self) -> None:
        time.sleep(0.3)  # a slow close: a shutdown that returned early would miss it
        super().close()


def test_a_sender_may_shut_its_monitor_down(caplog: pytest.LogCaptureFixture) -> None:
    """Called on the sender's own thread, shutdown does not join that thread (Python refuses
    to): the sender is told to close, delivers what was queued, and closes once."""
    rec = _StopsOnFirst()
    rec.monitor = mon = monitor(rec, rate=0.2, flush_timeout=5.0)
    workers = {t for t in threading.enumerate() if t.name.startswith("stroboscope-sender")}
    mon.start()
    rec.wait_for(1)
    deadline = time.monotonic() + 10
    while not mon._closed and time.monotonic() < deadline:  # the sender's shutdown began
        time.sleep(0.01)
    mon.shutdown()  # from another thread: waits for the last events and the sender's close
    assert "failed to publish" not in caplog.text and "cannot join" not in caplog.text
    assert "did not take the flushed event" not in caplog.text
    assert rec.closed == 1 and not mon.raw_sampler.running
    assert rec.waited < 2.5  # flush did not wait its timeout for an event behind itself
    assert len(rec.events) == 3  # the event, then flush's and shutdown's: delivered, then closed
    left = {t for t in threading.enumerate() if t.name.startswith("stroboscope-sender")}
    for thread in left - workers:
        thread.join(5)
        assert not thread.is_alive()


def test_plain_callable_sender() -> None:
    events: list[dict[str, Any]] = []
    mon = monitor(events.append)
    mon.start()
    wait_rows(mon, 10)
    mon.shutdown()
    assert len(events) == 1 and "memory" in events[0]


def test_extended_keys() -> None:
    rec = Recorder()
    mon = monitor(rec, extended=True)
    mon.start()
    wait_rows(mon, 30)
    mon.shutdown()
    ev = rec.events[-1]
    ncpu = psutil.cpu_count()
    assert {f"cpu.{i}.cpu_percent" for i in range(ncpu)} <= set(ev)
    assert {"proc.cpu.percent", "disk.in", "disk.out"} <= set(ev)
    assert all(0 <= ev[f"cpu.{i}.cpu_percent"] <= 100 for i in range(ncpu))


def test_bad_arguments_speak() -> None:
    with pytest.raises(ValueError, match="aggregate must be one of"):
        monitor(Recorder(), aggregate="median")
    with pytest.raises(ValueError, match="sample_rate_seconds"):
        monitor(Recorder(), rate=-1)
    with pytest.raises(TypeError, match="rank must be an int"):
        monitor(Recorder(), rank="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend_sender"):
        monitor(42)
    with pytest.raises(ValueError, match="at least the sampling interval"):
        monitor(Recorder(), rate=0.001, interval=0.01)


def test_proc_without_psutil_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    mon = monitor(Recorder())
    mon.shutdown()
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(ImportError, match=r"stroboscope\[psutil\]"):
        _ = mon.proc


TWO_FAKE_GPUS = """
devices 2
set 0 util 42
set 0 mem_util 17
set 0 mem_total 150000000000
set 0 mem_used 30000000000
set 0 temp 65
set 0 power 250000
set 0 power_limit 700000
set 1 util 7
set 1 temp 31
fail 1 power NOT_SUPPORTED
"""


@pytest.fixture
def fake_gpus(nvml: ScriptFn) -> None:
    """Two GPUs from the fake NVML library (tests/fake_nvml), the second without power readings."""
    nvml(TWO_FAKE_GPUS)


@pytest.mark.parametrize("rank", [None, 0])
def test_gpu_keys_from_the_fake_nvml(fake_gpus: None, rank: int | None) -> None:
    rec = Recorder()
    mon = monitor(rec, rank=rank, aggregate="last")
    assert mon.gpu_count == 2
    mon.start()
    try:
        wait_rows(mon, 40)
        mon.flush()
    finally:
        mon.shutdown()
    p = f"rank{rank}." if rank is not None else ""
    ev = rec.events[0]
    check_keys(ev, p, 2)
    assert ev[p + "gpu.0.gpu"] == 42.0 and ev[p + "gpu.1.gpu"] == 7.0
    assert ev[p + "gpu.0.memory"] == 17.0
    assert ev[p + "gpu.0.memoryAllocated"] == pytest.approx(20.0)  # 30 of 150 GB used
    assert ev[p + "gpu.0.temp"] == 65.0 and ev[p + "gpu.1.temp"] == 31.0
    assert ev[p + "gpu.0.powerWatts"] == pytest.approx(250.0)  # NVML's mW, as W
    assert ev[p + "gpu.0.powerPercent"] == pytest.approx(100 * 250 / 700)
    # GPU 1 reports no power: its power keys never appear.
    assert p + "gpu.1.powerWatts" not in ev and p + "gpu.1.powerPercent" not in ev


def test_crash_safe_monitor_dumps_after_sigkill(tmp_path: Path) -> None:
    import signal
    import textwrap

    dump = tmp_path / "monitor-dump.csv"
    code = textwrap.dedent(
        """
        import os, sys, time
        from stroboscope.compat import SystemMonitor
        mon = SystemMonitor(os.getpid(), lambda event: None, 1, crash_safe=True,
                            dump_path=sys.argv[1])
        mon.start()
        deadline = time.monotonic() + 60
        while mon.raw_sampler.stats().rows_written < 80 and time.monotonic() < deadline:
            time.sleep(0.01)
        print(mon.raw_sampler.stats().rows_written, flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(dump)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        written = int(child.stdout.readline())  # rows the sampler had written by then
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not dump.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dump.exists()
    table = pa_csv.read_csv(dump)
    assert table.num_rows >= written >= 80  # every row written before the kill is dumped
    assert "cpu.util_pct" in table.column_names and "mem.util_pct" in table.column_names
