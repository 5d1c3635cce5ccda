"""The gpu source end to end, on the fake NVML library loaded through STROBOSCOPE_NVML_LIBRARY.

The fake (tests/fake_nvml/fake_nvml.c, compiled here with the system C compiler) serves values
from a script; assertions compare recorded columns with the scripted values, units converted.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
import stroboscope
from _fake_nvml import fake_calls, script_fixture
from stroboscope import Frame, Sampler

ScriptFn = Callable[..., None]


@pytest.fixture
def nvml(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ScriptFn]:
    """Call with a script text (and optionally library="old") before building samplers."""
    yield from script_fixture(fake_libs, tmp_path, monkeypatch)


TWO_GPUS = """
devices 2
driver 550.54.15
name 0 Fake H200
name 1 Fake H200
uuid 0 GPU-aaaaaaaa-0000-0000-0000-000000000000
uuid 1 GPU-bbbbbbbb-0000-0000-0000-000000000000
set 0 util 42
set 0 mem_util 17
set 0 mem_total 150000000000
set 0 mem_used 30000000000
set 0 temp 65
set 0 power 250000
set 0 power_limit 700000
set 0 sm_clock 1755
set 0 mem_clock 2619
set 0 fan 40
set 1 util 7
set 1 temp 31
set 1 power 90000
fail 1 fan NOT_SUPPORTED
process 0 self 2147483648 55
"""


def landed(sampler: Sampler) -> int:
    """How many gpu readings have landed in the running sampler's rows so far.

    The rows are taken from the core, without provenance: a snapshot's provenance calls
    ``gpu_status()``, whose probing read would take scripted values."""
    column = Frame(sampler._core.snapshot()).to_arrow().column("gpu.read_mono_ns")
    return len(column) - int(column.null_count)


def record(sampler: Sampler, readings: int, timeout: float = 60.0) -> pa.Table:
    """Runs ``sampler`` until ``readings`` gpu readings have landed in its rows (not: for a set
    time); returns its rows."""
    with sampler:
        deadline = time.monotonic() + timeout
        while (n := landed(sampler)) < readings:
            assert time.monotonic() < deadline, f"{n} of {readings} readings after {timeout} s"
            time.sleep(0.005)
    return sampler.snapshot().to_arrow()


def values(table: pa.Table, name: str) -> list[float]:
    """The non-null cells of the numeric column ``name``."""
    cells: list[float] = table.column(name).drop_null().to_pylist()
    return cells


def test_scripted_values_land_in_columns(nvml: ScriptFn) -> None:
    nvml(TWO_GPUS)
    status = stroboscope.gpu_status()
    assert status["loaded"] and status["device_count"] == 2
    assert status["driver_version"] == "550.54.15"
    assert [d["name"] for d in status["devices"]] == ["Fake H200", "Fake H200"]
    assert "fan_pct" in status["devices"][1]["unavailable"]

    s = Sampler(0.001, sources={"memory": None, "gpu": 0.01})
    table = record(s, 8)  # until 8 readings have landed (not: until 0.25 s have passed)
    for name in ["gpu.0.util_pct", "gpu.0.temp_c", "gpu.1.power_w", "gpu.read_mono_ns"]:
        assert name in table.column_names
    assert set(values(table, "gpu.0.util_pct")) == {42.0}
    assert set(values(table, "gpu.0.mem_util_pct")) == {17.0}
    assert set(values(table, "gpu.0.mem_used_bytes")) == {30_000_000_000}
    assert set(values(table, "gpu.0.mem_total_bytes")) == {150_000_000_000}
    assert values(table, "gpu.0.mem_allocated_pct") == pytest.approx(
        [20.0] * len(values(table, "gpu.0.mem_allocated_pct"))
    )
    assert set(values(table, "gpu.0.temp_c")) == {65.0}
    assert set(values(table, "gpu.0.power_w")) == {250.0}  # mW -> W
    assert set(values(table, "gpu.0.power_limit_w")) == {700.0}
    power_pct = values(table, "gpu.0.power_pct")
    assert power_pct and power_pct == pytest.approx([250 / 700 * 100] * len(power_pct))
    assert set(values(table, "gpu.0.sm_clock_mhz")) == {1755.0}
    assert set(values(table, "gpu.0.fan_pct")) == {40.0}
    assert set(values(table, "gpu.0.proc_mem_bytes")) == {2147483648}
    assert set(values(table, "gpu.1.util_pct")) == {7.0}
    assert set(values(table, "gpu.1.power_w")) == {90.0}
    assert table.column("gpu.1.fan_pct").null_count == table.num_rows  # NOT_SUPPORTED: null
    # Polled every 10 ms on its own thread; each reading lands once, with the time it was taken.
    readings = table.filter(table.column("gpu.read_mono_ns").is_valid())
    read_at = readings.column("gpu.read_mono_ns").to_pylist()
    assert len(set(read_at)) == len(read_at) >= 8  # every reading once
    assert len(read_at) <= s.stats().source("gpu").reads  # at most one per due tick
    lag = readings.column("mono_ns").to_numpy() - readings.column("gpu.read_mono_ns").to_numpy()
    # A reading lands on the first due tick after it was taken: within a poll interval (10 ms),
    # plus however late that tick ran (the sampler's own worst lateness), plus 10 ms of margin;
    # never more than the 50 ms this held on an idle machine unless the sampler ran late.
    bound = max(50_000_000, 10_000_000 + s.stats().lateness_max_ns + 10_000_000)
    assert (lag >= 0).all() and (lag < bound).all(), (lag.max(), bound)
    # The memory column (every 1 ms tick) is untouched by the GPU polling.
    assert table.column("mem.total_bytes").null_count == 0
    del s


def test_energy_since_start_and_wrap(nvml: ScriptFn) -> None:
    # +1000, then a wrap at 2**32 (+296 to the top, +704 after it), then +1000: 3000 in all.
    nvml("devices 1\nset 0 energy 4294966000 4294967000 704 1704\n")
    s = Sampler(0.01, sources=["gpu"], gpu_samples=False)
    table = record(s, 10)  # the 4 scripted values, then the last one repeated
    energy = values(table, "gpu.0.energy_mj")
    assert energy == sorted(energy)
    # Each row carries the latest reading when it is copied; a reading overtaken by the next one
    # before a tick copied it is skipped, which a since-start counter survives intact.
    assert set(energy) <= {0, 1000, 2000, 3000}
    assert energy[-1] == 3000  # the last scripted value repeats: no further energy
    del s


def test_lost_gpu_mid_run_keeps_the_other_and_the_past(nvml: ScriptFn) -> None:
    nvml("devices 2\nset 0 temp 50\nset 1 temp 60\nlost 1 after 3\n")
    s = Sampler(0.005, sources={"gpu": 0.01})
    table = record(s, 15)  # device 1 serves 3 readings, device 0 carries on
    t1 = table.column("gpu.1.temp_c").to_pylist()
    t0 = values(table, "gpu.0.temp_c")
    seen = [v for v in t1 if v is not None]
    assert seen and set(seen) == {60.0}  # recorded before the loss, kept
    assert len(t0) > len(seen) + 5  # device 0 carried on after device 1 was lost
    gpu = next(src for src in s.stats().sources if src.name == "gpu")
    assert gpu.reason and "lost" in gpu.reason.lower()
    assert s.stats().running is False  # stopped by us, not by the fault
    del s


def test_select_by_uuid_and_cuda_visible_devices(
    nvml: ScriptFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml(TWO_GPUS)
    s = Sampler(0.01, sources=["gpu"], gpus=["GPU-bbbbbbbb"], gpu_samples=False)
    names = [c.name for c in s.columns]
    assert "gpu.1.temp_c" in names and "gpu.0.temp_c" not in names
    del s
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbbbbbb-0000-0000-0000-000000000000")
    s = Sampler(0.01, sources=["gpu"], gpus="cuda", gpu_samples=False)
    table = record(s, 3)
    assert set(values(table, "gpu.0.temp_c")) == {31.0}  # cuda:0 is NVML device 1
    assert "gpu.1.temp_c" not in table.column_names
    del s
    with pytest.raises(ValueError, match="matches no GPU UUID"):
        Sampler(0.01, sources=["gpu"], gpus=["GPU-ffff"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(ValueError, match="hides every GPU"):
        Sampler(0.01, sources=["gpu"], gpus="cuda")


def test_driver_samples_long_frame(nvml: ScriptFn) -> None:
    now_us = time.time_ns() // 1000
    ts = [now_us - 3000, now_us - 2000, now_us - 1000]
    nvml(
        "devices 1\n"
        f"samples 0 power {ts[0]}:250000 {ts[1]}:260000 {ts[2]}:255000\n"
        f"samples 0 gpu_util {ts[0]}:10 {ts[2]}:90\n"
    )
    s = Sampler(0.01, sources=["gpu"], gpu_sample_interval=0.02)
    with s:  # until the 5 driver samples were collected, then a few more polls (not: 0.15 s)
        deadline = time.monotonic() + 60
        while len(s.gpu_samples()) < 5:
            assert time.monotonic() < deadline, "driver samples not collected after 60 s"
            time.sleep(0.005)
        # A poll calls nvmlDeviceGetSamples once per kind (5 kinds at most), then keeps what it
        # got: 15 more calls include at least two whole polls after the samples were seen, each
        # of which must find nothing new.
        calls = fake_calls("nvmlDeviceGetSamples")
        while fake_calls("nvmlDeviceGetSamples") < calls + 15:
            assert time.monotonic() < deadline, "driver samples not polled after 60 s"
            time.sleep(0.005)
    frame = s.gpu_samples()
    table = frame.to_arrow()
    assert table.column_names == ["time", "mono_ns", "gpu", "kind", "value"]
    rows = sorted(
        zip(
            table.column("kind").to_pylist(),
            table.column("time").cast(pa.int64()).to_pylist(),
            table.column("value").to_pylist(),
        )
    )
    assert rows == [
        ("gpu_util_pct", ts[0] * 1000, 10.0),
        ("gpu_util_pct", ts[2] * 1000, 90.0),
        ("power_w", ts[0] * 1000, 250.0),
        ("power_w", ts[1] * 1000, 260.0),
        ("power_w", ts[2] * 1000, 255.0),
    ]  # each driver sample exactly once
    mono = table.column("mono_ns").to_numpy()
    utc = table.column("time").cast(pa.int64()).to_numpy()
    assert len(set((utc - mono).tolist())) == 1  # one clock mapping for all rows
    assert abs(int(mono.max()) - time.monotonic_ns()) < 5_000_000_000
    assert len(s.gpu_samples(drain=True)) == 5
    assert len(s.gpu_samples(drain=True)) == 0
    assert pa.table(frame).num_rows == 5
    del s


def test_no_library_means_no_gpu_and_a_reason(
    nvml: ScriptFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(tmp_path / "nope" / "libnvidia-ml.so.1"))
    gc.collect()
    status = stroboscope.gpu_status()
    assert not status["loaded"] and status["device_count"] == 0
    assert "libnvidia-ml.so.1" in status["reason"]
    s = Sampler(0.01)
    assert not any(c.name.startswith("gpu.") for c in s.columns)  # default set: no gpu
    with pytest.raises(RuntimeError, match="NVML"):
        Sampler(0.01, sources=["gpu"])
    info = {i["name"]: i for i in stroboscope.available_sources()}
    assert not info["gpu"]["available"] and info["gpu"]["reason"]


def test_init_error_and_old_driver(nvml: ScriptFn) -> None:
    nvml("init_error DRIVER_NOT_LOADED\n")
    status = stroboscope.gpu_status()
    assert not status["loaded"] and status["init_error"] == 9
    gc.collect()
    nvml("devices 1\nset 0 temp 44\n", library="old")
    status = stroboscope.gpu_status()
    assert status["loaded"]
    resolved = {sym["wanted"]: sym["resolved"] for sym in status["symbols"]}
    assert resolved["nvmlInit_v2"] == "nvmlInit"
    s = Sampler(0.01, sources=["gpu"], gpu_samples=False)
    table = record(s, 3)
    assert set(values(table, "gpu.0.temp_c")) == {44.0}
    del s


def test_gpu_in_default_set_when_present(nvml: ScriptFn) -> None:
    nvml(TWO_GPUS)
    s = Sampler(0.01)
    assert any(c.name == "gpu.1.temp_c" for c in s.columns)
    del s


def test_a_dear_call_is_held_back_and_said(nvml: ScriptFn) -> None:
    """A call that costs more than 50 µs is made at most every 20 times its cost (the call
    budget, tested in detail in tests/cpp/test_nvml_budget.cpp); a running source's gpu_status()
    says which calls, what each costs and how often it is made, and the cheap ones keep coming
    at every read."""
    nvml("cost 0 nvmlDeviceGetProcessUtilization 3000\nprocess_util 0 self 40/10/0/0\n")
    with Sampler(interval=0.001, sources={"gpu": 0.001}) as sampler:
        start = fake_calls("nvmlDeviceGetTemperature")
        deadline = time.monotonic() + 60
        while fake_calls("nvmlDeviceGetTemperature") - start < 300:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status = stroboscope.gpu_status()
        table = Frame(sampler._core.snapshot()).to_arrow()
    [device] = status["devices"]
    [held] = device["held_back"]
    assert held["call"] == "nvmlDeviceGetProcessUtilization"
    assert held["cost_us"] >= 3000 and held["every_ms"] == pytest.approx(held["cost_us"] / 50)
    assert "nvmlDeviceGetProcessUtilization costs" in status["text"]
    read = table.column("gpu.read_mono_ns").drop_null().to_pylist()
    span_ms = (read[-1] - read[0]) / 1e6
    mine = len(values(table, "gpu.0.proc_sm_util_pct"))
    assert len(values(table, "gpu.0.temp_c")) == len(read) >= 200
    assert mine <= 4 + span_ms / 60 + 1, (mine, span_ms)
