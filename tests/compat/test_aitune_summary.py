"""aitune's own summary code on our rows, against a hand computation from the same rows.

aitune's summary (``get_metrics_summary`` in ``aitune/utils/monitoring/parse_metrics.py``) is
taken from the aitune 0.6.0 wheel itself: fetched with pip in the test setup (CI installs the
package from the registry too) or read from ``$STROBOSCOPE_AITUNE_WHEEL``, checked against the
wheel's sha256, and loaded alone (it needs only pandas; importing the ``aitune`` package would
pull torch, TensorRT and NVML bindings). See tests/data/aitune/README.md.

The GPU columns come from the fake NVML library with scripted readings.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import logging
import os
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pandas")  # the pandas extra: aitune's tables are DataFrames
import pandas as pd
from _fake_nvml import ScriptFn
from stroboscope import scopes
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _dump, _monitoring, _rows

WHEEL = "aitune-0.6.0-py3-none-any.whl"
WHEEL_SHA256 = "86c285eecd4166d5fb3bb1b32d993e8801b6795d69a6e89003f058a35d2f8e38"
SUMMARY_FILE = "aitune/utils/monitoring/parse_metrics.py"


@pytest.fixture(scope="session")
def aitune_summary(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """aitune 0.6.0's parse_metrics module, from its wheel."""
    d = tmp_path_factory.mktemp("aitune")
    wheel = os.environ.get("STROBOSCOPE_AITUNE_WHEEL")
    if not wheel:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "aitune==0.6.0", "-d", str(d)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"pip could not fetch aitune 0.6.0: {done.stderr[-2000:]}"
        wheel = str(d / WHEEL)
    data = Path(wheel).read_bytes()
    assert hashlib.sha256(data).hexdigest() == WHEEL_SHA256, f"{wheel} is not aitune 0.6.0"
    with zipfile.ZipFile(wheel) as z:
        (d / "parse_metrics.py").write_bytes(z.read(SUMMARY_FILE))
    spec = importlib.util.spec_from_file_location("aitune_parse_metrics", d / "parse_metrics.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[_monitoring.HardwareMetricsSession]:
    monkeypatch.chdir(tmp_path)
    fresh = _monitoring.HardwareMetricsSession()
    monkeypatch.setattr(_monitoring, "_DEFAULT_SESSION", fresh)
    fresh.enable()
    yield fresh
    fresh._end(dump=False)
    gc.collect()  # the fake NVML re-reads its script once every holder is gone


def wait_rows(s: _monitoring.HardwareMetricsSession, more: int = 3) -> None:
    sampler = s._sampler
    assert sampler is not None
    goal = sampler.stats().rows_written + more
    deadline = time.monotonic() + 30
    while sampler.stats().rows_written < goal:
        assert time.monotonic() < deadline, "the sampler wrote no rows for 30 s"
        time.sleep(0.01)


UTIL0 = [10, 20, 35, 50, 65, 80, 95]
UTIL1 = [3, 5, 8]
POWER0 = [100000, 150000, 230500, 310250]  # mW
POWER1 = [60000, 90000]
USED0 = [10 << 30, 12 << 30, 15 << 30]
SCRIPT = f"""
devices 2
set 0 util {" ".join(map(str, UTIL0))}
set 1 util {" ".join(map(str, UTIL1))}
set 0 power {" ".join(map(str, POWER0))}
set 1 power {" ".join(map(str, POWER1))}
set 0 mem_total 150000000000
set 0 mem_used {" ".join(map(str, USED0))}
set 1 mem_total 80000000000
set 1 mem_used 2000000000
"""
GROUPS = [("unet", "TensorRTBackend(use_dynamo=False,q=Q(p='int8'))"), ("vae", "Eager()")]


def gpu_rows(session: _monitoring.HardwareMetricsSession) -> pd.DataFrame:
    for module, backend in GROUPS:
        with scopes.labels(module=module, backend=backend), aitune.annotate(module):
            wait_rows(session)
    with aitune.annotate("unlabelled"):
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None
    return df


@pytest.fixture
def nvml_env(nvml: ScriptFn) -> None:
    """The fake NVML library serving SCRIPT (see tests/sampling/test_gpu.py)."""
    nvml(SCRIPT)


def hand_summary(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """The figures by (module, backend), computed with plain Python from the rows."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    records = df.to_dict("records")
    for key in {(r["module_name"], r["backend"]) for r in records}:
        if not all(isinstance(k, str) for k in key):
            continue
        rows = [r for r in records if (r["module_name"], r["backend"]) == key]
        fig: dict[str, float] = {"Host\nMem [GB]": max(r["host_memory_used"] for r in rows) / 2**30}
        for i in (0, 1):
            fig[f"Cuda:{i}\nMem [GB]"] = max(r[f"cuda:{i}_memory_used"] for r in rows) / 2**30
            util = [r[f"cuda:{i}_utilization"] for r in rows]
            fig[f"Cuda:{i}\nUtil% mean"] = statistics.mean(util)
            fig[f"Cuda:{i}\nUtil% max"] = max(util)
            power = [r[f"cuda:{i}_power_usage_milliwatts"] for r in rows]
            fig[f"power{i} mean"] = statistics.mean(power) / 1000
            fig[f"power{i} max"] = max(power) / 1000
        out[key] = fig
    return out


def test_gpu_rows_and_aitunes_summary(
    nvml_env: None,
    session: _monitoring.HardwareMetricsSession,
    tmp_path: Path,
    aitune_summary: ModuleType,
    caplog: pytest.LogCaptureFixture,
) -> None:
    df = gpu_rows(session)
    kinds = ("memory_used", "memory_free", "memory_total", "utilization", "power_usage_milliwatts")
    gpu = [f"cuda:{i}_{m}" for i in (0, 1) for m in kinds]
    assert list(df.columns) == [
        "host_cpu_percent",
        "host_memory_used",
        "host_memory_free",
        "torch_allocated",
        "torch_reserved",
        *gpu,
        "scope",
        "module_name",
        "backend",
        "timestamp",
    ]
    assert (df[gpu].dtypes == np.int64).all()
    # every cell is one of the scripted readings, in NVML's units
    assert set(df["cuda:0_utilization"]) <= set(UTIL0)
    assert set(df["cuda:1_utilization"]) <= set(UTIL1)
    assert set(df["cuda:0_power_usage_milliwatts"]) <= set(POWER0)
    assert set(df["cuda:1_power_usage_milliwatts"]) <= set(POWER1)
    assert set(df["cuda:0_memory_used"]) <= set(USED0)
    assert (df["cuda:0_memory_total"] == 150000000000).all()
    assert (df["cuda:0_memory_free"] == 150000000000 - df["cuda:0_memory_used"]).all()
    assert (df["cuda:1_memory_used"] == 2000000000).all()
    assert set(df["scope"]) == {"unet", "vae", "unlabelled"}

    theirs = aitune_summary.get_metrics_summary(df)
    ours = _dump.metrics_summary(df)
    assert ours is not None
    pd.testing.assert_frame_equal(ours, theirs)
    assert list(ours.index.names) == ["Module", "Backend"]
    hand = hand_summary(df)
    assert sorted(hand) == sorted(ours.index)
    for key, fig in hand.items():
        row = ours.loc[[key]].iloc[0].tolist()  # by position: aitune's power titles repeat
        got = {c: float(v) for c, v in zip(ours.columns, row) if not c.startswith("Power")}
        power = [float(v) for c, v in zip(ours.columns, row) if c.startswith("Power")]
        assert [c for c in ours.columns if c.startswith("Power")] == [
            "Power [W]\nmean",
            "Power [W]\nmax",
        ] * 2  # aitune names no device in its power titles
        got.update(
            {
                f"power{i} {s}": power[2 * i + j]
                for i in (0, 1)
                for j, s in enumerate(("mean", "max"))
            }
        )
        assert got.keys() == fig.keys()
        for name, value in fig.items():
            assert got[name] == pytest.approx(value, abs=0.005 + 1e-9), (key, name)

    caplog.set_level(logging.INFO, logger="stroboscope")
    aitune.dump_metrics(df)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Hardware metrics summary (1/2)" in text and "(2/2)" in text  # 11 figures, 6 a table
    assert "    q=Q(\n" not in text and "q=Q(" in text and "use_dynamo=False," in text
    (csv,) = tmp_path.glob("hardware_metrics_*.csv")
    pd.testing.assert_frame_equal(pd.read_csv(csv), pd.read_csv(_to_csv(df, tmp_path)))


def _to_csv(df: pd.DataFrame, tmp_path: Path) -> Path:
    path = tmp_path / "reference.csv"
    df.to_csv(path, index=False)  # aitune's dump: pandas' CSV of the rows, no index
    return path


@pytest.mark.parametrize("gpus", [0, 2])
def test_summary_edge_cases_match_aitune(aitune_summary: ModuleType, gpus: int) -> None:
    """Missing labels, NaN cells, groups met in any order, no GPU columns."""
    rng = np.random.default_rng(7)
    n = 40
    data: dict[str, object] = {
        "host_cpu_percent": rng.uniform(0, 100, n),
        "host_memory_used": rng.integers(1 << 30, 64 << 30, n),
    }
    for i in range(gpus):
        data[f"cuda:{i}_memory_used"] = rng.integers(0, 80 << 30, n).astype(float)
        data[f"cuda:{i}_utilization"] = rng.integers(0, 101, n)
        data[f"cuda:{i}_power_usage_milliwatts"] = rng.integers(50_000, 700_000, n)
    df = pd.DataFrame(data)
    if gpus:
        df.loc[3, "cuda:0_memory_used"] = np.nan
    df["module_name"] = [["b", "a", None][k] for k in rng.integers(0, 3, n)]
    df["backend"] = [["y", "x", None][k] for k in rng.integers(0, 3, n)]
    ours = _dump.metrics_summary(df)
    assert ours is not None
    pd.testing.assert_frame_equal(ours, aitune_summary.get_metrics_summary(df))
    for empty in (df.iloc[:0], df.drop(columns="module_name"), df.assign(backend=None)):
        assert _dump.metrics_summary(empty) is None
        assert aitune_summary.get_metrics_summary(empty) is None


def test_backend_labels_display_like_aitune(aitune_summary: ModuleType) -> None:
    for label in [
        "TorchEagerBackend()",
        "plain",
        "TensorRTBackend(use_dynamo=False,quantization_config=ONNXQuantizationConfig(precision='int8'))",
        "A(B(1,2),c=D(e=F(g=1)),h='i')",
    ]:
        assert _dump.backend_label(label) == aitune_summary.format_backend_label_for_display(label)


def test_rows_innermost_scope_and_edge_rows_by_hand() -> None:
    """aitune_rows on a hand-made frame: which scope each row gets, which rows are kept."""
    t = [100, 200, 300, 400, 500, 600, 700]
    frame = pa.table(
        {
            "mono_ns": pa.array(t, pa.int64()),
            "cpu.util_pct": pa.array([1.0, None, 3.0, 4.0, 5.0, 6.0, 7.0]),
            "mem.used_bytes": pa.array([10, 20, 30, 40, 50, 60, 70], pa.int64()),
            "mem.available_bytes": pa.array([5, 5, 5, 5, 5, 5, 5], pa.int64()),
            "gpu.0.util_pct": pa.array([None, None, 3.0, 4.0, 5.0, 6.0, None]),
            "gpu.0.power_w": pa.array([1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]),
        }
    )
    intervals = pa.table(
        {
            "name": ["outer", "inner", "blink", "tail"],
            "begin_ns": pa.array([150, 250, 320, 650], pa.int64()),
            "end_ns": pa.array([550, 450, 330, None], pa.int64()),
            "module": ["m", None, "m", None],
            "backend": [None, "b", None, None],
        }
    )
    edges: list[_rows.Edge] = [
        (325, "blink", "m", None)
    ]  # asked inside blink; its row (400) came after it closed
    df = _rows.aitune_rows(frame, intervals, 50, [(260, 7, 9)], edges)
    # 100: before any scope (dropped); 200 outer; 300 inner; 400 blink's edge row; 500 outer
    # (inner ended at 450); 600: none open (dropped); 700 tail (still open)
    assert df["scope"].tolist() == ["outer", "inner", "blink", "outer", "tail"]
    # (a missing label is NaN in a pandas string column, as in aitune's frame of dicts)
    assert df["module_name"].fillna("-").tolist() == ["m", "-", "m", "m", "-"]
    assert df["backend"].fillna("-").tolist() == ["-", "b", "-", "-", "-"]
    assert df["timestamp"].tolist() == pytest.approx([0.15e-6, 0.25e-6, 0.35e-6, 0.45e-6, 0.65e-6])
    assert df["host_memory_used"].tolist() == [20, 30, 40, 50, 70]
    assert np.isnan(df["host_cpu_percent"][0]) and df["host_cpu_percent"][1] == 3.0
    assert df["torch_allocated"].tolist() == [0, 7, 7, 7, 7]  # read at 260: rows from then on
    # a null GPU cell takes the reading before it; before the first reading, the first one
    assert df["cuda:0_utilization"].tolist() == [3, 3, 4, 5, 6]
    assert df["cuda:0_utilization"].dtype == np.int64
    assert df["cuda:0_power_usage_milliwatts"].tolist() == [2000, 2500, 3000, 3500, 4500]
    assert df["cuda:0_memory_used"].isna().all()  # not in the frame: unknown


def test_rows_a_carried_row_lends_its_gpu_reading_only() -> None:
    """Rows are converted as they leave the ring; the last row of the previous batch comes
    first (``carried``) so a GPU cell between two readings has the latest one, and is not
    returned twice."""
    frame = pa.table(
        {
            "mono_ns": pa.array([100, 200, 300], pa.int64()),
            "mem.used_bytes": pa.array([1, 2, 3], pa.int64()),
            "gpu.0.power_w": pa.array([7.25, None, 8.0]),
        }
    )
    intervals = pa.table(
        {
            "name": ["s"],
            "begin_ns": pa.array([0], pa.int64()),
            "end_ns": pa.array([None], pa.int64()),
        }
    )
    df = _rows.aitune_rows(frame, intervals, 0, carried=1)
    assert df["host_memory_used"].tolist() == [2, 3]
    assert df["cuda:0_power_usage_milliwatts"].tolist() == [7250, 8000]
    assert df["cuda:0_power_usage_milliwatts"].dtype == np.int64
