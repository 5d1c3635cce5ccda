"""attribute_trace against hand computations on a trace in torch.profiler's format with scripted
GPU power and process figures (CPU, RSS, I/O), and on the real (CPU) torch.profiler trace in
tests/data/traces. Live torch.profiler runs: tests/analysis/test_attribution_torch.py."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
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
CPU = [20.0, 100.0, 60.0, 60.0, 0.0]  # proc.cpu_pct
RSS = [1000, 1100, 1300, 1300, 900]  # proc.rss_bytes
READ_BYTES = [0, 0, 400, 400, 800]  # proc.read_bytes (a counter)
WRITE_BYTES = [0, 1000, 1000, 5000, 5000]  # proc.write_bytes

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
    # The frame covers the profile: every launch is matched and has the process's figures.
    assert (df["matched"] == df["launches"]).all() and df.attrs["unmatched_launches"] == 0
    assert df.attrs["cpu_column"] == "proc.cpu_pct"
    assert df["cpu_pct_mean"].between(0, 100 * (os.cpu_count() or 1)).all()
    assert df["rss_delta_bytes"].notna().all() and (df["rss_n"] >= 2).all()


def test_cpu_rss_and_io_per_op(tmp_path: Path) -> None:
    process: dict[str, Sequence[float]] = {
        "proc.cpu_pct": CPU,
        "proc.rss_bytes": RSS,
        "proc.read_bytes": READ_BYTES,
        "proc.write_bytes": WRITE_BYTES,
    }
    df = attribute_trace(write_trace(tmp_path / "t.json"), frame(READ, process))
    assert df.attrs["cpu_column"] == "proc.cpu_pct" and df.attrs["unmatched_launches"] == 1
    gemm = row(df, ("kernel", "gemm"))
    assert gemm["matched"] == 3
    cpu = sum(area(READ, CPU, a, b) for c, n, a, b in LAUNCHES if n == "gemm")
    assert gemm["cpu_pct_mean"] == pytest.approx(cpu / 0.017)
    # By hand (%·s): [2,3] ms 36 -> 44 % (mean 40): 0.04; [12,18] 92 -> 68 % (80): 0.48;
    # [25,35] 60 % until 30 ms (0.3), then 60 -> 30 % (45): 0.225; over 17 ms of launches.
    assert gemm["cpu_pct_mean"] == pytest.approx((0.04 + 0.48 + 0.3 + 0.225) / 0.017)
    assert gemm["cpu_pct_n"] == 5
    # RSS at the edges: [2,3] 1020 -> 1030, [12,18] 1140 -> 1260, [25,35] 1300 -> 1100
    assert gemm["rss_delta_bytes"] == pytest.approx(10 + 120 - 200)
    assert gemm["rss_n"] == 5
    # write_bytes: [2,3] 100 of the first 1000, [12,18] none, [25,35] 3000 -> 5000
    assert gemm["write_bytes"] == pytest.approx(100 + 0 + 2000)
    # read_bytes: [2,3] none, [12,18] 80 -> 320, [25,35] 400 -> 600
    assert gemm["read_bytes"] == pytest.approx(0 + 240 + 200)
    assert gemm["read_bytes_n"] == gemm["write_bytes_n"] == 5
    relu = row(df, ("kernel", "relu"))  # [5, 5.5] ms, inside one gap: thin evidence
    assert relu["cpu_pct_mean"] == pytest.approx(62.0) and relu["cpu_pct_n"] == 2
    assert relu["write_bytes"] == pytest.approx(50) and relu["rss_delta_bytes"] == 5
    late = row(df, ("kernel", "late"))  # after the last row: counted, not attributed
    assert late["launches"] == 1 and late["matched"] == 0
    for column in ("cpu_pct_mean", "rss_delta_bytes", "read_bytes", "write_bytes"):
        assert math.isnan(late[column]), column
    assert late["cpu_pct_n"] == late["rss_n"] == 0
    assert not {"energy_j", "power_w_mean", "util_pct_mean"} & set(df.columns)  # no GPU here


def test_the_machine_cpu_without_the_process_columns(tmp_path: Path) -> None:
    samples = frame(READ, {"cpu.util_pct": CPU, "proc.cpu_pct": [None] * 5})
    df = attribute_trace(write_trace(tmp_path / "t.json"), samples, categories=["cpu_op"])
    assert df.attrs["cpu_column"] == "cpu.util_pct"
    mm = row(df, ("cpu_op", "aten::mm"))
    assert mm["cpu_pct_mean"] == pytest.approx(area(READ, CPU, 1 * MS, 36 * MS) / 0.035)
    assert "rss_delta_bytes" not in df.columns and "write_bytes" not in df.columns


def test_no_op_with_samples_is_said(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json")
    later = [t + 3_600_000 * MS for t in READ]  # a frame of an hour later
    with pytest.raises(ValueError) as info:
        attribute_trace(path, frame(later, {"proc.cpu_pct": CPU}))
    message = str(info.value)
    assert "none of the 7 launches" not in message  # gpu_memcpy is not a chosen category
    assert message.startswith(f"none of the 6 launches of {path} has samples: its events run ")
    assert "2026-09-21T" in message and "Record the frame while the profiler runs" in message
    with pytest.raises(ValueError, match="the frame has no row"):
        attribute_trace(path, frame([], {"proc.cpu_pct": []}), anchor_realtime_ns=ANCHOR)


def test_no_event_of_the_categories_is_said(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json")
    with pytest.raises(ValueError, match=r"no complete event of categories \['gpu_kernel'\]"):
        attribute_trace(path, frame(READ, {"proc.cpu_pct": CPU}), categories=["gpu_kernel"])
    with pytest.raises(ValueError, match=r"categories: \['cpu_op', 'gpu_memcpy', 'kernel'\]"):
        attribute_trace(path, frame(READ, {"proc.cpu_pct": CPU}), categories=["gpu_kernel"])
    with pytest.raises(TypeError, match="categories must be a sequence of strings"):
        attribute_trace(path, frame(READ, {"proc.cpu_pct": CPU}), categories="kernel")


def test_trace_without_base_time(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ValueError, match="baseTimeNanoseconds"):
        attribute_trace(path, frame(READ, {"gpu.0.power_w": POWER}))
