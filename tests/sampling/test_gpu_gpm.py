"""GPM metrics (the gpu_gpm source) on the fake NVML library: columns only on GPUs that support
GPM, sample pairs never closer than 100 ms however fast the source is asked to poll, one sample
per poll, values in the columns' units, and the reasons gpu_status() gives where GPM is missing.

The fake serves the k-th successful nvmlGpmMetricsGet on a GPU the k-th scripted value of each
metric (the last repeats) and counts pairs whose samples were taken less than 100 ms apart.
A reading the sampler's tick did not copy before the next one landed is skipped in the table, so
sequences are checked as subsets plus their final values.
"""

from __future__ import annotations

import time

import pytest
import stroboscope
from _fake_nvml import (
    ScriptFn,
    fake_calls,
    fake_counter,
    record_reads,
    values,
)
from stroboscope import Sampler

MIB = 1048576.0


HOPPER_AND_AMPERE = """
devices 2
name 0 Fake H100
name 1 Fake A100
gpm 0 on
gpm_metric 0 2 40 50 60
gpm_metric 0 3 25
gpm_metric 0 5 70
gpm_metric 0 10 33.5
gpm_metric 0 21 3 5
gpm_metric 0 60 2
"""


def test_gpm_columns_values_and_pairs(nvml: ScriptFn) -> None:
    nvml(HOPPER_AND_AMPERE)
    info = {i["name"]: i for i in stroboscope.available_sources()}
    assert info["gpu_gpm"]["available"] and info["gpu_gpm"]["default"]  # on where supported
    assert info["gpu_gpm"]["resolution_ns"] == 125_000_000
    # Asked to poll every 20 ms: the source still pairs samples more than 100 ms apart.
    s = Sampler(0.005, sources={"gpu_gpm": 0.02})
    names = [c.name for c in s.columns]
    gpm = [n for n in names if n.startswith("gpu.")]
    assert gpm and all(n.startswith("gpu.0.") for n in gpm)  # the A100 has no GPM columns
    units = {c.name: c.unit for c in s.columns}
    assert units["gpu.0.sm_active_pct"] == "%"
    assert units["gpu.0.gpm_pcie_rx_bytes_per_s"] == "bytes/s"
    started = time.monotonic()
    table = record_reads(s, 5, function="nvmlGpmSampleGet")
    elapsed = time.monotonic() - started

    sm = values(table, "gpu.0.sm_active_pct")
    assert set(sm) <= {40.0, 50.0, 60.0} and sm[-1] == 60.0
    assert set(values(table, "gpu.0.sm_occupancy_pct")) == {25.0}
    assert set(values(table, "gpu.0.tensor_active_pct")) == {70.0}
    assert set(values(table, "gpu.0.dram_active_pct")) == {33.5}
    rx = values(table, "gpu.0.gpm_pcie_rx_bytes_per_s")
    assert set(rx) <= {3 * MIB, 5 * MIB} and rx[-1] == 5 * MIB  # MiB/s -> bytes/s
    assert set(values(table, "gpu.0.gpm_nvlink_rx_bytes_per_s")) == {2 * MIB}
    # Not scripted (NOT_SUPPORTED in its entry): null, the other metrics unaffected.
    assert table.column("gpu.0.fp64_active_pct").null_count == table.num_rows

    # Never a pair closer than 100 ms, one sample per pair after the first, and no faster
    # than 10 pairs a second (the elapsed time bounds it from above, whatever the load).
    assert fake_counter("fake_nvml_gpm_close_pairs", 0) == 0
    assert fake_counter("fake_nvml_gpm_min_gap_ns", 0) > 100_000_000
    pairs = fake_calls("nvmlGpmMetricsGet")
    samples = fake_calls("nvmlGpmSampleGet")
    assert pairs >= 4 and samples == pairs + 1
    assert pairs <= elapsed / 0.1 + 1
    assert fake_calls("nvmlGpmSampleGet", device=1) == 0

    why = stroboscope.gpu_status()["devices"][1]["unavailable"]["gpm"]
    assert "does not support GPM" in why and "Hopper" in why
    assert "gpm" not in stroboscope.gpu_status()["devices"][0]["unavailable"]
    del s


def test_no_gpm_anywhere_says_why(nvml: ScriptFn) -> None:
    nvml("devices 1\nname 0 Fake A100\n")
    info = {i["name"]: i for i in stroboscope.available_sources()}
    assert not info["gpu_gpm"]["default"]
    with pytest.raises(RuntimeError, match="GPU 0: nvmlGpmQueryDeviceSupport: this GPU does not"):
        Sampler(0.01, sources=["gpu_gpm"])
    assert not info["gpu_gpm"]["available"] and "Hopper" in info["gpu_gpm"]["reason"]
    nvml("devices 1\ngpm 0 on\n", library="old")  # a driver without the nvmlGpm* functions
    with pytest.raises(RuntimeError, match="does not export the nvmlGpm"):
        Sampler(0.01, sources=["gpu_gpm"])


def test_gpm_gpu_lost_mid_run(nvml: ScriptFn) -> None:
    nvml(
        "devices 2\n"
        "gpm 0 on\ngpm 1 on\n"
        "gpm_metric 0 2 10\ngpm_metric 1 2 20\n"
        "fail 1 nvmlGpmSampleGet GPU_IS_LOST after 3\n"
    )
    s = Sampler(0.005, sources={"gpu_gpm": 0.02})
    table = record_reads(s, 8, function="nvmlGpmSampleGet")
    lost = table.column("gpu.1.sm_active_pct").to_pylist()
    seen = [v for v in lost if v is not None]
    assert set(seen) <= {20.0} and len(seen) <= 2  # pairs (1, 2) and (2, 3), then lost
    last = max((i for i, v in enumerate(lost) if v is not None), default=-1)
    later = values(table.slice(last + 1), "gpu.0.sm_active_pct")
    assert len(later) >= 4 and set(later) == {10.0}  # GPU 0 carries on
    reason = s.stats().source("gpu_gpm").reason
    assert reason is not None and "lost" in reason
    assert fake_calls("nvmlGpmSampleGet", device=1) == 4  # not asked again after the loss
    del s
