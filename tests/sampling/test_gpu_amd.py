"""The amd_gpu source end to end, on the fake amdsmi library loaded through
STROBOSCOPE_AMDSMI_LIBRARY (tests/fake_amdsmi/fake_amdsmi.c, compiled by the ``fake_amdsmi``
fixture). Expected values are computed by hand from the scripts below."""

from __future__ import annotations

import ctypes
import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
import stroboscope
from _fake_nvml import ScriptFn
from stroboscope import Sampler, _core

ENERGY = "amdsmi_get_energy_count"


def calls(function: str, device: int = 0) -> int:
    """How often the fake (already loaded by the core) served ``function`` on ``device``."""
    lib = ctypes.CDLL(os.environ["STROBOSCOPE_AMDSMI_LIBRARY"])
    lib.fake_amdsmi_calls.restype = ctypes.c_ulonglong
    lib.fake_amdsmi_calls.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    return int(lib.fake_amdsmi_calls(device, function.encode()))


def record(sampler: Sampler, reads: int, function: str = ENERGY) -> pa.Table:
    """Runs ``sampler`` until device 0 has served ``function`` ``reads`` times (one per poll)."""
    with sampler:
        deadline = time.monotonic() + 60
        while calls(function) < reads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls(function) >= reads, "the amd_gpu source stopped polling"
    return sampler.snapshot().to_arrow()


def values(table: pa.Table, name: str) -> list[float]:
    cells: list[float] = table.column(name).drop_null().to_pylist()
    return cells


def in_order(seen: Sequence[float], expected: Sequence[float]) -> bool:
    """``seen`` (readings repeated across rows) walks ``expected`` in order, skipping none back."""
    i = 0
    for v in seen:
        while i < len(expected) and expected[i] != v:
            i += 1
        if i == len(expected):
            return False
    return True


TWO_GPUS = """
devices 2
0 gfx 10 20 30
0 umc 5 6 7
0 mem_used 1000000 2000000 3000000
0 mem_total 8000000000
0 temp 55 56 57
0 resolution 15.5
# 4294966000 -> 400 is a 32-bit wrap of the accumulator
0 energy 4294960000 4294966000 400 2400
0 energy_ts 1000000000 1001000000 1002000000 1003000000
0 gfx_clock 1500 1600 2100
0 mem_clock 900 1300
1 gfx 77
1 resolution 1
1 energy 0 1000
1 energy_ts 0 2000000
1 fail amdsmi_get_temp_metric 2
"""
# Device 0, by hand: ticks 6000, then (2**32 - 4294966000) + 400 = 1696, then 2000; each tick
# is 15.5 uJ and the readings are 1 ms apart (uJ per ns times 1e3 is W).
ENERGY_MJ = [0, 93, 119, 150]  # floor of 0, 93000, 119288, 150288 uJ / 1000
POWER_W = [93.0, 26.288, 31.0]  # 93000, 26288, 31000 uJ over 1 ms each


def test_columns_and_values_match_hand_computation(amd: ScriptFn) -> None:
    amd(TWO_GPUS)
    sampler = Sampler(0.005, sources={"amd_gpu": None})
    table = record(sampler, reads=8)
    suffixes = [
        "util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w",
        "energy_mj", "graphics_clock_mhz", "mem_clock_mhz",
    ]  # fmt: skip
    expected = [f"gpu.{i}.{s}" for i in (0, 1) for s in suffixes] + ["amd_gpu.read_mono_ns"]
    assert [c for c in table.column_names if c not in ("time", "mono_ns")] == expected

    assert in_order(values(table, "gpu.0.util_pct"), [10, 20, 30])
    assert values(table, "gpu.0.util_pct")[-1] == 30
    assert in_order(values(table, "gpu.0.mem_util_pct"), [5, 6, 7])
    assert in_order(values(table, "gpu.0.mem_used_bytes"), [1e6, 2e6, 3e6])
    assert set(values(table, "gpu.0.mem_total_bytes")) == {8_000_000_000}
    assert in_order(values(table, "gpu.0.temp_c"), [55, 56, 57])
    assert in_order(values(table, "gpu.0.graphics_clock_mhz"), [1500, 1600, 2100])
    assert values(table, "gpu.0.mem_clock_mhz")[-1] == 1300

    energy = values(table, "gpu.0.energy_mj")
    assert in_order(energy, ENERGY_MJ)  # a reading may miss its row; none is out of order
    assert energy[-1] == ENERGY_MJ[-1]  # across the wrap, no jump
    power = values(table, "gpu.0.power_w")
    assert in_order([round(p, 6) for p in power], POWER_W)
    assert power[-1] == pytest.approx(31.0)  # equal timestamps later: the last power stands

    assert set(values(table, "gpu.1.util_pct")) == {77}
    assert values(table, "gpu.1.energy_mj")[-1] == 1  # 1000 ticks of 1 uJ
    assert values(table, "gpu.1.power_w")[-1] == pytest.approx(0.5)  # 1000 uJ over 2 ms
    # NOT_SUPPORTED: the column stays null, the call is not made again, and it is no failure.
    assert table.column("gpu.1.temp_c").null_count == table.num_rows
    assert calls("amdsmi_get_temp_metric", 1) == 1
    # (failures may count a tick that came before the first poll: "no reading yet")
    source = sampler.stats().source("amd_gpu")
    assert source.reason is None and source.interface == "amdsmi"


def test_columns_share_the_gpu_sources_names_and_units(amd: ScriptFn, nvml: ScriptFn) -> None:
    """Same name, same unit, type and kind as NVML's; AMD GPUs are numbered after NVML's."""
    amd("devices 2\n")
    nvml("devices 1\n")  # after amd(), which makes NVML absent
    options = _core.SourceOptions()
    nvidia = {c["name"]: c for c in _core.source_columns("gpu", options)}
    amd_columns = _core.source_columns("amd_gpu", options)
    assert amd_columns[0]["name"] == "gpu.1.util_pct"  # after NVML's gpu.0
    assert amd_columns[-1]["name"] == "gpu.2.mem_clock_mhz"
    for col in amd_columns:
        twin = nvidia[col["name"].replace("gpu.1.", "gpu.0.").replace("gpu.2.", "gpu.0.")]
        assert (col["unit"], col["dtype"], col["kind"]) == (
            twin["unit"],
            twin["dtype"],
            twin["kind"],
        )
    by_name = {s["name"]: s for s in stroboscope.available_sources()}
    assert by_name["gpu"]["default"] and not by_name["amd_gpu"]["default"]
    gc.collect()


def test_default_where_nvml_sees_no_gpu(amd: ScriptFn) -> None:
    amd("devices 1\n")
    by_name = {s["name"]: s for s in stroboscope.available_sources()}
    assert by_name["amd_gpu"]["available"] and by_name["amd_gpu"]["default"]
    assert by_name["amd_gpu"]["interface"] == "amdsmi"
    assert not by_name["gpu"]["default"]


FAILING = """
devices 1
0 gfx 40
0 temp 60
0 resolution 2
0 energy 0 500 1000 1500 2000 2500
0 energy_ts 0 1000000 2000000 3000000 4000000 5000000
# a passing error on activity reads 2 and 3; temperature fails for good from read 4
0 fail amdsmi_get_gpu_activity 8 2 3
0 fail amdsmi_get_temp_metric 8 4
"""


def test_failing_calls_null_their_cells_and_sampling_continues(amd: ScriptFn) -> None:
    amd(FAILING)
    sampler = Sampler(0.005, sources={"amd_gpu": None})
    table = record(sampler, reads=10)
    # Only the failed group's cells are null; the others keep coming (energy: 2500 ticks of 2 uJ).
    assert values(table, "gpu.0.energy_mj")[-1] == 5
    assert values(table, "gpu.0.power_w")[-1] == pytest.approx(1.0)  # 1000 uJ per ms
    assert set(values(table, "gpu.0.temp_c")) == {60}
    landed = table.filter(table.column("amd_gpu.read_mono_ns").is_valid())
    assert landed.column("gpu.0.temp_c")[-1].as_py() is None  # failing for good
    assert landed.column("gpu.0.util_pct")[-1].as_py() == 40  # the passing error passed
    assert set(values(table, "gpu.0.util_pct")) == {40}
    # A failed call is asked again on every read (unlike NOT_SUPPORTED).
    assert calls("amdsmi_get_temp_metric") >= 10
    source = sampler.stats().source("amd_gpu")
    assert source.reason == ("amdsmi_get_temp_metric failed on an AMD GPU: temp_c is null")
    assert source.failures >= 7  # reads 2, 3 (activity) and 4.. (temperature)


def test_absent_library_is_unavailable_with_the_loaders_words(
    amd: ScriptFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    amd("devices 1\n")
    missing = tmp_path / "libamd_smi_missing.so"
    monkeypatch.setenv("STROBOSCOPE_AMDSMI_LIBRARY", str(missing))
    by_name = {s["name"]: s for s in stroboscope.available_sources()}
    info = by_name["amd_gpu"]
    assert not info["available"] and not info["default"]
    assert info["reason"].startswith(f"the amd_gpu source is unavailable: cannot open {missing}")
    assert "STROBOSCOPE_AMDSMI_LIBRARY" in info["reason"]
    with pytest.raises(RuntimeError, match="amd_gpu source is unavailable: cannot open"):
        Sampler(0.01, sources={"amd_gpu": None})


@pytest.mark.parametrize(
    ("script", "words"),
    [
        (
            "init 34\n",
            "amdsmi_init(AMDSMI_INIT_AMD_GPUS) failed: AMDSMI_STATUS_DRIVER_NOT_LOADED: Driver "
            "not loaded (amdsmi status 34)",
        ),
        ("devices 0\n", "amdsmi found no AMD GPU"),
    ],
)
def test_init_failure_or_no_gpu_is_unavailable(amd: ScriptFn, script: str, words: str) -> None:
    amd(script)
    info = {s["name"]: s for s in stroboscope.available_sources()}["amd_gpu"]
    assert not info["available"] and not info["default"]
    assert info["reason"] == f"the amd_gpu source is unavailable: {words}"
    with pytest.raises(RuntimeError, match="amd_gpu source is unavailable"):
        Sampler(0.01, sources={"amd_gpu": None})


def test_an_energy_window_on_amd_gpus_alone(amd: ScriptFn) -> None:
    """Energy windows serve the amd_gpu source as they serve the gpu one: the counter, each
    reading timed by amd_gpu.read_mono_ns; the window is the counter's rise between two rows."""
    amd("devices 1\n0 resolution 1000\n0 energy 0 1000 2000 3000 4000 5000 6000 7000 8000\n")
    with Sampler(0.002, sources={"amd_gpu": 0.002}) as s:
        deadline = time.monotonic() + 60
        while calls(ENERGY) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        with s.energy_window("step", timeout=30) as w:
            while calls(ENERGY) < 7 and time.monotonic() < deadline:
                time.sleep(0.005)
    assert list(w.joules) == [0] and w.gpus[0].method == "counter"
    # Each reading adds 1000 ticks of 1000 uJ: 1 J; the window holds between 1 and 7 of them.
    assert 0.0 < w.joules[0] <= 7.0 and w.gpus[0].low_j <= w.joules[0] <= w.gpus[0].high_j
