"""The driver's buffered GPU samples of a sampler (stroboscope.sampling._gpu_samples.GpuSamples),
on their own: the devices' labels, the recorder's lifecycle and its long table, against samples
scripted into the fake NVML library."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from _fake_nvml import ScriptFn
from stroboscope import Sampler
from stroboscope.sampling._gpu_samples import GpuSamples


def test_without_a_recorder_the_labels_are_the_given_ones_and_the_table_is_empty() -> None:
    part = GpuSamples([0, 2], ["0", "1"], None)
    assert part.recorder is None
    assert part.labels == {0: 0, 2: 1}  # NVML index -> the label of gpu.LABEL.*
    assert GpuSamples([1, 3], [], None).labels == {1: 1, 3: 3}  # no labels: the index
    part.start()  # nothing to start, stop or forget
    part.stop()
    part.after_fork_in_child()
    table = part.frame().to_arrow()
    assert table.column_names == ["time", "mono_ns", "gpu", "kind", "value"]
    assert table.num_rows == 0


def test_the_recorder_keeps_each_driver_sample_once(nvml: ScriptFn) -> None:
    now_us = time.time_ns() // 1000
    ts = [now_us - 3000, now_us - 2000, now_us - 1000]
    nvml(
        "devices 2\n"
        f"samples 1 power {ts[0]}:250000 {ts[1]}:260000 {ts[2]}:255000\n"
        f"samples 0 gpu_util {ts[0]}:10\n"
    )
    part = GpuSamples([], [], 0.02)  # every device NVML sees, labelled by index
    assert part.recorder is not None
    assert part.labels == {0: 0, 1: 1}
    part.start()
    try:
        deadline = time.monotonic() + 60
        while part.frame().to_arrow().num_rows < 4:
            assert time.monotonic() < deadline, "driver samples not collected after 60 s"
            time.sleep(0.005)
    finally:
        part.stop()
    table = part.frame(drain=True).to_arrow()
    rows = sorted(
        zip(
            table.column("gpu").to_pylist(),
            table.column("kind").to_pylist(),
            table.column("time").cast(pa.int64()).to_pylist(),
            table.column("value").to_pylist(),
        )
    )
    assert rows == [
        (0, "gpu_util_pct", ts[0] * 1000, 10.0),
        (1, "power_w", ts[0] * 1000, 250.0),
        (1, "power_w", ts[1] * 1000, 260.0),
        (1, "power_w", ts[2] * 1000, 255.0),
    ]
    assert part.frame(drain=True).to_arrow().num_rows == 0  # drained: not again
    del part


def test_a_sampler_without_the_gpu_source_has_no_recorder(nvml: ScriptFn) -> None:
    nvml("devices 1\n")
    s = Sampler(0.01, sources=["memory"])  # gpu_samples=True, but no gpu source to sample
    assert s._gpus.recorder is None
    assert s.gpu_samples().to_arrow().num_rows == 0
    s.close()
    del s


def test_the_sampler_labels_cuda_devices_by_their_cuda_ordinal(
    nvml: ScriptFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml("devices 2\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    s = Sampler(0.01, sources=["gpu"], gpus="cuda", gpu_samples=False)
    assert s.gpu_labels == {1: 0}  # NVML 1 is cuda:0, its columns gpu.0.*
    assert "gpu.0.power_w" in s.schema.names and "gpu.1.power_w" not in s.schema.names
    s.close()
    del s
