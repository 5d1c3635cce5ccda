"""Energy and power per scope on real frames: the fake NVML library (tests/fake_nvml) serves a
scripted energy counter and power ramp, and summary's figures are compared with the values that
landed in the frame, by hand."""

from __future__ import annotations

import time
from typing import Callable

import pyarrow as pa
import pytest
from _fake_nvml import hand_trapezoid, readings
from _scope_tables import Call, intervals
from stroboscope import Sampler
from stroboscope.analysis.scopes import samples_by_scope, summary

ScriptFn = Callable[[str], None]


ENERGY = [0, 1000, 3000, 6000, 10000, 15000, 21000, 28000, 36000, 45000, 55000, 66000]
POWER_MW = [100000 * (k + 1) for k in range(12)]


def gpu_frame(nvml: ScriptFn) -> pa.Table:
    nvml(
        "devices 1\n"
        f"set 0 energy {' '.join(map(str, ENERGY))}\n"
        f"set 0 power {' '.join(map(str, POWER_MW))}\n"
    )
    s = Sampler(0.001, sources={"memory": None, "gpu": 0.005}, gpu_samples=False)
    with s:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            read = s.snapshot().to_arrow().column("gpu.0.energy_mj").drop_null()
            if len(read) >= 8:
                break
            time.sleep(0.005)
    table = s.snapshot().to_arrow()
    del s
    return table


def test_energy_per_scope_is_exact_against_the_scripted_counter(nvml: ScriptFn) -> None:
    table = gpu_frame(nvml)
    t, energy = readings(table, "gpu.0.energy_mj")
    # The column counts from the source's first reading, which may be any of the first scripted
    # values (the poll thread's first reads race the sampler's start): landed = scripted values
    # less one of them.
    assert len(t) >= 8
    assert any({e + base for e in energy} <= set(ENERGY) for base in ENERGY), energy
    mid = (t[4] + t[5]) // 2
    calls: list[Call] = [
        ("edges", "edges", 1, 1, 0, t[1], t[4], {}),  # edges on readings: an exact difference
        ("between", "between", 1, 1, 0, (t[2] + t[3]) // 2, mid, {}),
    ]
    df = summary(table, intervals(calls, anchor=None))
    assert df.attrs["energy_method"] == {"gpu.0": "counter"}
    assert df.loc["edges", "energy_j"] == (energy[4] - energy[1]) / 1000
    a = (t[2] + t[3]) // 2

    def e_at(x: int, k: int) -> float:
        return energy[k] + (energy[k + 1] - energy[k]) * (x - t[k]) / (t[k + 1] - t[k])

    assert df.loc["between", "energy_j"] == pytest.approx(
        (e_at(mid, 4) - e_at(a, 2)) / 1000, rel=1e-9
    )
    assert df.loc["edges", "energy_j_n"] == 3  # readings 1, 2, 3 (the end's is not inside)


def test_energy_falls_back_to_the_power_integral(nvml: ScriptFn) -> None:
    table = gpu_frame(nvml).drop_columns(["gpu.0.energy_mj"])
    t, power = readings(table, "gpu.0.power_w")
    assert set(power) <= {mw / 1000 for mw in POWER_MW}
    a, b = (t[1] + t[2]) // 2, (t[5] + 3 * t[6]) // 4
    df = summary(table, intervals([("a", "a", 1, 1, 0, a, b, {})], anchor=None))
    assert df.attrs["energy_method"] == {"gpu.0": "power integral"}
    assert df.loc["a", "energy_j"] == pytest.approx(hand_trapezoid(t, power, a, b) / 1e9, rel=1e-9)
    inside = [p for x, p in zip(t, power) if a <= x < b]
    assert df.loc["a", "power_w_n"] == len(inside) == 4
    assert df.loc["a", "power_w_mean"] == pytest.approx(sum(inside) / len(inside))
    assert df.loc["a", "power_w_max"] == max(inside)


def test_samples_by_scope_on_a_real_frame(nvml: ScriptFn) -> None:
    table = gpu_frame(nvml)
    mono = table.column("mono_ns").to_pylist()
    b, e = mono[3], mono[len(mono) // 2]
    joined = samples_by_scope(table, intervals([("a", "a", 9, 9, 0, b, e, {})], anchor=None))
    assert joined.num_rows == table.num_rows
    assert joined.column("scope").to_pylist() == ["a" if b <= t < e else None for t in mono]
    assert joined.drop_columns(
        ["scope", "scope_name", "thread_id", "stack_id", "scope_depth"]
    ).equals(table)
