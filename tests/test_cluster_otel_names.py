"""OTelExporter's names, units and GPU attributes: checked against the semantic conventions as
the ``opentelemetry-semantic-conventions`` package states them, and GPU values from the fake NVML
library (tests/fake_nvml) against the sampler's own frame, through the OTLP/HTTP receiver."""

from __future__ import annotations

import gc
import inspect
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _otlp_receiver import http_receiver, metrics, point, points

pytest.importorskip("opentelemetry.sdk")
from stroboscope._base.identity import Identity
from stroboscope.cluster.otel import OTelExporter
from stroboscope.sampling import CoreSampler as Sampler

WHO = Identity(host="gpu-node", rank=0, world_size=1)
UUID0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID1 = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
SCRIPT = f"""
devices 2
name 0 Fake H200
name 1 Fake H200
uuid 0 {UUID0}
uuid 1 {UUID1}
set 0 util 10 20 30 40 50 60
set 0 temp 60 62 64 66
set 0 power 200000 300000 250000
set 0 energy 0 1000 2500 4000 6000
set 0 mem_total 150000000000
set 0 mem_used 30000000000 31000000000 32000000000
set 0 pcie_tx 0 1000 5000
set 0 ecc_corrected 2
set 1 util 7
set 1 power 90000
"""


def semconv() -> dict[str, tuple[str, str]]:
    """Metric name -> (instrument, unit) as opentelemetry-semantic-conventions states them."""
    from opentelemetry.semconv._incubating.metrics import (
        hw_metrics,
        process_metrics,
        system_metrics,
    )

    found = {}
    for module in (hw_metrics, process_metrics, system_metrics):
        text = inspect.getsource(module)
        for m in re.finditer(r'^\w+: Final = "([^"]+)"\n"""\n(.*?)"""', text, re.S | re.M):
            spec = re.search(r"Instrument: (\w+)\s+Unit: (\S+)", m.group(2))
            if spec:
                found[m.group(1)] = (spec.group(1), spec.group(2))
    return found


@pytest.fixture
def two_gpus(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    gc.collect()  # the fake re-reads its script once every holder is gone
    script = tmp_path / "script.txt"
    script.write_text(SCRIPT)
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs["new"]))
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(script))
    yield
    gc.collect()


def test_every_convention_name_has_the_conventions_unit_and_instrument(two_gpus: None) -> None:
    names = [s["name"] for s in Sampler.available_sources() if s["available"]]
    assert "gpu" in names
    s = Sampler(0.01, sources=names, disk_paths=["/", "/tmp"], gpu_samples=False)
    e = OTelExporter(s, export_interval=3600, export_timeout=0.5, identity=WHO)
    conventions = semconv()
    assert {"system.cpu.utilization", "hw.gpu.utilization", "hw.energy"} <= conventions.keys()
    planned = {m.name: m for m in e.metrics}
    ours = [m for m in planned.values() if not m.name.startswith("stroboscope.")]
    for metric in ours:
        assert metric.name in conventions, f"{metric.name} is not a semantic convention"
        assert (metric.instrument, metric.unit) == conventions[metric.name], metric.name
    for name in ("system.cpu.utilization", "system.memory.usage", "system.network.io",
                 "system.disk.io", "system.filesystem.usage", "process.cpu.time",
                 "process.cpu.utilization", "process.memory.usage", "process.thread.count",
                 "hw.gpu.utilization", "hw.gpu.memory.usage", "hw.power", "hw.energy",
                 "hw.temperature"):  # fmt: skip
        assert name in planned, name
    # Columns without a convention: under stroboscope.*, each with a unit, valid names.
    for metric in planned.values():
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]{0,254}", metric.name), metric.name
        assert metric.unit and metric.points, metric.name
    assert planned["stroboscope.load.1m"].unit == "1"
    assert planned["stroboscope.gpu.sm_clock"].unit == "MHz"
    if "cgroup.mem_used_bytes" in s.schema.names:  # the cgroup source exists here
        assert planned["stroboscope.cgroup.mem_used"].unit == "By"
    assert planned["stroboscope.gpu.memory_controller.utilization"].unit == "1"
    assert planned["stroboscope.gpu.power.utilization"].unit == "1"
    # A byte counter's own rate is not exported beside it (rate() over the counter is exact).
    assert "gpu.0.pcie_tx_bytes_per_s" in s.schema.names and "hw.gpu.io" in planned
    assert not [name for name in planned if name.startswith("stroboscope.gpu.pcie")], planned
    # Two filesystems: one metric, a mountpoint attribute each (from the sampler's disk_paths).
    mounts = {p.attributes["system.filesystem.mountpoint"]
              for p in planned["system.filesystem.limit"].points}  # fmt: skip
    assert mounts == {"/", "/tmp"}
    # Every point of a metric has distinct attributes (else a backend would merge them).
    for metric in planned.values():
        keys = [tuple(sorted(p.attributes.items())) for p in metric.points]
        assert len(keys) == len(set(keys)), metric.name
    e.close(timeout=5)
    s.close()
    del s


def test_gpu_values_and_hw_attributes_match_the_frame(two_gpus: None) -> None:
    server, got = http_receiver()
    s = Sampler(0.01, sources={"gpu": None}, gpu_samples=False)
    e = OTelExporter(
        s, endpoint=f"http://127.0.0.1:{server.server_address[1]}", export_interval=3600,
        identity=WHO, export_timeout=30,
    )  # fmt: skip
    try:
        with s:  # until the scripted sequences have been served (not: until a time passed)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                read = s.snapshot().to_arrow().column("gpu.read_mono_ns")
                if len(read) - read.null_count >= 8:
                    break
                time.sleep(0.01)
        assert e.force_flush()
        (request,) = got.wait_for(1)
    finally:
        e.close(timeout=5)
        server.shutdown()
        server.server_close()
    table = s.copy_since(0).to_arrow()

    def col(name: str) -> np.ndarray:
        return np.asarray(table.column(name).drop_null().to_numpy(zero_copy_only=False), float)

    gpu0 = {"hw__id": UUID0, "hw__type": "gpu"}
    util = col("gpu.0.util_pct")
    assert len(set(util)) > 1  # the scripted sequence, not one value
    assert point(request, "hw.gpu.utilization", **gpu0) == pytest.approx(util.mean() / 100)
    assert point(request, "stroboscope.hw.gpu.utilization.max", **gpu0) == util.max() / 100
    assert point(request, "hw.gpu.utilization", hw__id=UUID1) == pytest.approx(0.07)
    assert point(request, "hw.power", **gpu0) == pytest.approx(col("gpu.0.power_w").mean())
    assert point(request, "hw.power", hw__id=UUID1) == pytest.approx(90.0)
    assert point(request, "hw.temperature", **gpu0) == pytest.approx(col("gpu.0.temp_c").mean())
    assert point(request, "hw.energy", **gpu0) == col("gpu.0.energy_mj")[-1] / 1000
    assert metrics(request)["hw.energy"].unit == "J"
    assert point(request, "hw.gpu.memory.usage", **gpu0) == pytest.approx(
        col("gpu.0.mem_used_bytes").mean()
    )
    assert point(request, "hw.gpu.memory.limit", **gpu0) == 150_000_000_000
    assert (
        point(request, "hw.gpu.io", network__io__direction="transmit", **gpu0)
        == (col("gpu.0.pcie_tx_bytes")[-1])
    )
    assert point(request, "hw.errors", error__type="ecc_corrected", **gpu0) == 2
    (_, attrs), *_ = [p for p in points(metrics(request)["hw.power"]) if p[1]["hw.id"] == UUID0]
    assert attrs == {"hw.id": UUID0, "hw.type": "gpu", "hw.name": "gpu0", "hw.model": "Fake H200"}
    s.close()
    del s
