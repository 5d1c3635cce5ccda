"""The drop-in SystemMonitor: its exact surface and keys, values against psutil, windows.

Tolerances are stated per test: psutil reads the same /proc files a few milliseconds after the
monitor's window closed, so level values may move a little between the two.
"""

from __future__ import annotations

import gc
import inspect
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from stroboscope import available_sources
from stroboscope.analysis import WindowAggregator
from stroboscope.compat import (
    AbstractBackendSender,
    CompatKeys,
    StatsDict,
    SystemMonitor,
)

MiB = 1048576.0
GPU_AVAILABLE = any(s["name"] == "gpu" and s["available"] for s in available_sources())

BASE_KEYS = {
    "cpu",
    "memory",
    "network",
    "disk",
    "proc.memory.availableMB",
    "proc.memory.rssMB",
    "proc.memory.percent",
    "proc.cpu.threads",
}
GPU_REQUIRED = ("gpu", "memory", "memoryAllocated", "temp")
GPU_POWER = ("powerWatts", "powerPercent")


class Recorder(AbstractBackendSender):
    """Keeps every event it is given (a subclass of the ABC, as the users' senders are)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed = 0
        self.cond = threading.Condition()

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        with self.cond:
            self.events.append(dict(event))
            self.cond.notify_all()

    def close(self) -> None:
        self.closed += 1

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= n, timeout), (
                f"got {len(self.events)} events, wanted {n}"
            )


def monitor(sender: Any, rate: float = 60.0, rank: int | None = None, **kw: Any) -> SystemMonitor:
    return SystemMonitor(os.getpid(), sender, rate, rank, **kw)


def wait_rows(mon: SystemMonitor, rows: int) -> None:
    """Wait until ``mon``'s sampler has written ``rows`` rows since it started: at its 10 ms
    interval, at least (rows - 1) x 10 ms of sampled time (its CPU % needs 100 ms), however
    busy the cores are. Never a set sleep: a loaded machine takes fewer ticks in one."""
    deadline = time.monotonic() + 60
    while mon.raw_sampler.stats().rows_written < rows:
        assert time.monotonic() < deadline, f"fewer than {rows} rows after 60 s"
        time.sleep(0.01)


def check_keys(event: dict[str, Any], prefix: str, gpu_count: int) -> None:
    expected = {prefix + k for k in BASE_KEYS}
    for i in range(gpu_count):
        expected |= {f"{prefix}gpu.{i}.{k}" for k in GPU_REQUIRED}
    optional = {f"{prefix}gpu.{i}.{k}" for i in range(gpu_count) for k in GPU_POWER}
    assert expected <= set(event), f"missing keys: {sorted(expected - set(event))}"
    assert set(event) - expected <= optional, f"extra keys: {sorted(set(event) - expected)}"
    assert set(event[prefix + "network"]) == {"sent", "recv"}
    for key, value in event.items():
        values = value.values() if isinstance(value, dict) else [value]
        for v in values:
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (key, v)
            assert math.isfinite(v) and v >= 0, (key, v)


def test_top_level_import() -> None:
    from stroboscope import AbstractBackendSender as Abs
    from stroboscope import SystemMonitor as Mon

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
    from stroboscope.compat import GPUHandle, SamplerDict

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


def test_plain_callable_sender() -> None:
    events: list[dict[str, Any]] = []
    mon = monitor(events.append)
    mon.start()
    wait_rows(mon, 10)
    mon.shutdown()
    assert len(events) == 1 and "memory" in events[0]


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


FAKE_NVML = Path(__file__).parent / "fake_nvml" / "fake_nvml.c"
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
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two GPUs from the fake NVML library (tests/fake_nvml), the second without power readings."""
    cc = shutil.which(os.environ.get("CC", "")) or shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "a C compiler is needed to build the fake NVML library"
    lib = tmp_path / "libfake_nvml.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(FAKE_NVML)], check=True)
    script = tmp_path / "gpus.txt"
    script.write_text(TWO_FAKE_GPUS)
    gc.collect()  # the library reads its script when nothing holds it any more
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(lib))
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(script))
    yield
    gc.collect()


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
        from stroboscope import SystemMonitor
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
