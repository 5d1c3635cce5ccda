"""attribute_trace on a live torch.profiler trace of real CPU work, recorded together with a
Sampler of the process (CPU, RSS, I/O) and the fake NVML library (a GPU drawing a known power, so
the power and energy columns have a known answer).

Each region (``record_function``, category ``user_annotation``) does one thing between two
quiet 5 ms: ``busy`` computes, ``idle`` sleeps, ``alloc`` fills a 64 MiB tensor, ``write``
writes 4 MiB to a file and fsyncs it, so each column's figure is known from what the region did.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _binaries import python_module
from stroboscope import Sampler
from stroboscope.analysis.attribution import attribute_trace

MiB = 1 << 20
POWER_W = 250.0
UTIL_PCT = 40.0


def quiet() -> None:
    time.sleep(0.005)


def record(tmp_path: Path) -> tuple[Path, Any, int, float]:
    """Run the four regions under the profiler and the sampler; the trace, the frame, how many
    aten::mm the busy region ran, and the process's CPU % over it (its CPU clock)."""
    torch = python_module("torch", install="pip install torch==2.13.0")
    from torch.profiler import ProfilerActivity, profile, record_function

    a = torch.randn(128, 128)
    block = os.urandom(4 * MiB)
    kept = []
    mms = 0
    sources = ["process", "process_io", "gpu"]
    with Sampler(0.001, sources=sources, max_overhead=None) as s:  # a row every ms
        time.sleep(0.05)  # the GPU is polled on a thread of its own: readings before and after
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("busy"):
                cpu0, wall0 = time.process_time(), time.monotonic()
                quiet()
                end = time.monotonic() + 0.04
                while time.monotonic() < end:
                    a = torch.mm(a, a).tanh()
                    mms += 1
                quiet()
                busy_pct = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
            with record_function("idle"):
                time.sleep(0.04)
            with record_function("alloc"):
                quiet()
                kept.append(torch.ones(64 * MiB // 4))  # float32: 64 MiB, every page written
                quiet()
            with record_function("write"):
                quiet()
                with open(tmp_path / "block.bin", "wb") as f:
                    f.write(block)
                    f.flush()
                    os.fsync(f.fileno())
                quiet()
        time.sleep(0.05)
        samples = s.snapshot().to_arrow()
    trace = tmp_path / "torch.json"
    prof.export_chrome_trace(str(trace))
    return trace, samples, mms, busy_pct


def test_every_column_on_real_cpu_ops(tmp_path: Path, nvml: Any) -> None:
    nvml(f"devices 1\nenergy_clock 0 1000 {int(POWER_W * 1000)}\nset 0 util {int(UTIL_PCT)}\n")
    trace, samples, mms, busy_pct = record(tmp_path)
    df = attribute_trace(trace, samples, categories=["user_annotation"])
    regions = df.droplevel("category")
    assert sorted(regions.index) == ["alloc", "busy", "idle", "write"]
    assert (df["launches"] == 1).all() and (df["matched"] == 1).all()
    assert df.attrs["unmatched_launches"] == 0 and df.attrs["cpu_column"] == "proc.cpu_pct"
    for column in ("cpu_pct_n", "rss_n", "read_bytes_n", "write_bytes_n", "power_n"):
        assert (df[column] >= 3).all(), column  # rows inside each region, not only around
    busy, idle = regions.loc["busy"], regions.loc["idle"]
    # computing, against sleeping (the sampler's own threads run in both); the busy figure is
    # the process's CPU clock over the region, to within the readings at its edges
    assert busy["cpu_pct_mean"] > idle["cpu_pct_mean"]
    assert busy_pct / 2 < busy["cpu_pct_mean"] < busy_pct * 2, busy_pct
    grew = regions.loc["alloc", "rss_delta_bytes"]
    assert 0.9 * 64 * MiB < grew < 1.25 * 64 * MiB
    assert abs(regions.loc["idle", "rss_delta_bytes"]) < 4 * MiB
    written = regions.loc["write", "write_bytes"]
    assert 4 * MiB <= written < 5 * MiB  # the block, and at most some of the file's metadata
    # the other regions write nothing of their own (the process's other writers: a few KiB)
    assert regions.loc["busy", "write_bytes"] < MiB and regions.loc["idle", "write_bytes"] < MiB
    assert df["read_bytes"].notna().all()
    # The GPU draws POWER_W all along: each region's energy is that power times its time, to
    # within the counter's 1 ms steps at its two edges.
    assert df.attrs["energy_method"] == "counter"
    for name, r in regions.iterrows():
        assert r["energy_j"] == pytest.approx(POWER_W * r["total_s"], abs=POWER_W * 0.002), name
        assert r["power_w_mean"] == pytest.approx(POWER_W, rel=0.05), name
        assert r["util_pct_mean"] == pytest.approx(UTIL_PCT), name
    # The same trace's aten ops: every matmul of the busy region, each with its figures.
    ops = attribute_trace(trace, samples, categories=["cpu_op"]).droplevel("category")
    mm = ops.loc["aten::mm"]
    assert mm["launches"] == mm["matched"] == mms and mms > 0
    assert not math.isnan(mm["cpu_pct_mean"]) and not math.isnan(mm["energy_j"])
