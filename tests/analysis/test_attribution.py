"""attribute_trace against hand computations on a trace in torch.profiler's format with scripted
GPU power, and on the real (CPU) torch.profiler trace in tests/data/traces."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _paths import DATA
from _scope_tables import ANCHOR, frame
from stroboscope.analysis.attribution import attribute_trace

MS = 1_000_000
BASE = ANCHOR - 5_000_000_000  # torch's baseTimeNanoseconds, 5 s before our mono 0
READ = [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS]
POWER = [100.0, 200.0, 200.0, 400.0, 100.0]  # W
UTIL = [10.0, 50.0, 50.0, 90.0, 10.0]  # %
ENERGY = [0.0, 1500.0, 3500.0, 6500.0, 9000.0]  # mJ: the trapezoids of POWER

# kernel launches on our monotonic clock (ns)
LAUNCHES = [
    ("kernel", "gemm", 2 * MS, 3 * MS),  # inside one gap
    ("kernel", "gemm", 12 * MS, 18 * MS),
    ("kernel", "gemm", 25 * MS, 35 * MS),  # across the reading at 30 ms
    ("kernel", "relu", 5 * MS, 5 * MS + 500_000),
    ("kernel", "late", 45 * MS, 46 * MS),  # after the last reading: no energy
    ("cpu_op", "aten::mm", 1 * MS, 36 * MS),
    ("gpu_memcpy", "copy", 1 * MS, 2 * MS),  # not a default category
]


def write_trace(path: Path) -> Path:
    events = [
        {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 1,
            "tid": 7,
            "ts": (a + ANCHOR - BASE) / 1000,
            "dur": (b - a) / 1000,
            "args": {"device": 0},
        }
        for cat, name, a, b in LAUNCHES
    ]
    events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}})
    path.write_text(
        json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE, "traceEvents": events})
    )
    return path


def row(df: Any, key: tuple[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = df.loc[key].to_dict()
    return out


def linear(t: list[int], v: list[float], x: float) -> float:
    k = max(i for i in range(len(t)) if t[i] <= x)
    return v[k] if k == len(t) - 1 else v[k] + (v[k + 1] - v[k]) * (x - t[k]) / (t[k + 1] - t[k])


def area(t: list[int], v: list[float], a: float, b: float) -> float:
    """Integral (value·s) of the piecewise-linear curve through (t, v) over [a, b]."""
    cuts = [a, *[x for x in t if a < x < b], b]
    return sum(
        (y - x) / 1e9 * (linear(t, v, x) + linear(t, v, y)) / 2 for x, y in zip(cuts, cuts[1:])
    )


def test_energy_power_and_utilisation_per_kernel(tmp_path: Path) -> None:
    samples = frame(READ, {"gpu.0.power_w": POWER, "gpu.0.util_pct": UTIL})
    df = attribute_trace(write_trace(tmp_path / "t.json"), samples)
    assert set(df.index) == {
        ("kernel", "gemm"),
        ("kernel", "relu"),
        ("kernel", "late"),
        ("cpu_op", "aten::mm"),
    }
    gemm = row(df, ("kernel", "gemm"))
    # By hand: [2,3] ms at 125 W mean = 0.125 J; [12,18] at 200 W = 1.2 J; [25,30] from 300 to
    # 400 W = 1.75 J and [30,35] from 400 to 250 W = 1.625 J.
    assert gemm["energy_j"] == pytest.approx(0.125 + 1.2 + 1.75 + 1.625)
    assert gemm["launches"] == 3 and gemm["total_s"] == pytest.approx(0.017)
    assert gemm["power_w_mean"] == pytest.approx(4.7 / 0.017)
    assert gemm["power_n"] == 5  # readings 0..4 all used
    util = sum(area(READ, UTIL, a, b) for c, n, a, b in LAUNCHES if n == "gemm")
    assert gemm["util_pct_mean"] == pytest.approx(util / 0.017)
    relu = row(df, ("kernel", "relu"))
    assert relu["energy_j"] == pytest.approx(152.5 * 0.0005)  # 150 W -> 155 W over 0.5 ms
    assert relu["power_n"] == 2  # the two readings around it: thin evidence
    late = row(df, ("kernel", "late"))
    assert math.isnan(late["energy_j"]) and late["power_n"] == 0
    mm = row(df, ("cpu_op", "aten::mm"))
    assert mm["energy_j"] == pytest.approx(area(READ, POWER, 1 * MS, 36 * MS))
    run = area(READ, POWER, 1 * MS, 40 * MS)  # the events' span [1, 46] ms within the readings
    assert df.attrs["run_energy_j"] == pytest.approx(run)
    assert gemm["energy_share"] == pytest.approx(4.7 / run)
    assert df.attrs["energy_method"] == "power integral"
    assert list(df["total_s"]) == sorted(df["total_s"], reverse=True)


def test_energy_from_the_counter_without_power(tmp_path: Path) -> None:
    samples = frame(READ, {"gpu.0.energy_mj": ENERGY})
    df = attribute_trace(write_trace(tmp_path / "t.json"), samples, categories=["kernel"])
    assert df.attrs["energy_method"] == "counter"
    # [2,3] ms: the counter rises 150 mJ/ms there; [25,35]: 1500 + 1250 mJ
    assert df.loc[("kernel", "relu"), "energy_j"] == pytest.approx(0.075)
    assert df.loc[("kernel", "gemm"), "energy_j"] == pytest.approx(0.150 + 1.2 + 1.5 + 1.25)
    assert "util_pct_mean" not in df.columns


def test_two_gpus_summed_or_chosen(tmp_path: Path) -> None:
    samples = frame(READ, {"gpu.0.power_w": POWER, "gpu.1.power_w": [50.0] * 5})
    path = write_trace(tmp_path / "t.json")
    both = attribute_trace(path, samples, categories=["kernel"])
    one = attribute_trace(path, samples, categories=["kernel"], gpus=[1])
    assert both.loc[("kernel", "gemm"), "energy_j"] == pytest.approx(4.7 + 50 * 0.017)
    assert one.loc[("kernel", "gemm"), "energy_j"] == pytest.approx(50 * 0.017)
    with pytest.raises(ValueError, match="gpus"):
        attribute_trace(path, samples, gpus=[3])


def test_real_torch_trace_counts_and_times() -> None:
    data = DATA / "traces"
    trace = json.loads((data / "torch_cpu_matmul.json").read_text())
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    samples = pq.read_table(data / "torch_cpu_matmul.samples.parquet")
    df = attribute_trace(data / "torch_cpu_matmul.json", samples)
    launches = Counter(e["name"] for e in ops)
    got = dict(zip(df.index.get_level_values("name"), df["launches"].astype(int)))
    assert got == dict(launches)
    for name in launches:
        total = sum(e["dur"] for e in ops if e["name"] == name) / 1e6
        assert df.loc[("cpu_op", name), "total_s"] == pytest.approx(total, abs=1e-8)
    assert "energy_j" not in df.columns  # a CPU-only frame: no GPU figures, not zeros


def test_trace_without_base_time(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ValueError, match="baseTimeNanoseconds"):
        attribute_trace(path, frame(READ, {"gpu.0.power_w": POWER}))
