"""The GPU labels of a frame's columns (analysis/_series.py): the one reading of ``gpu.{i}.…``
names that the provenance and the status line share."""

from __future__ import annotations

from stroboscope.analysis._series import gpu_columns, gpu_labels


def test_gpu_labels_are_the_devices_with_a_column_in_numeric_order() -> None:
    names = [
        "mono_ns",
        "gpu.10.power_w",
        "gpu.2.mig.1.util_pct",  # a MIG instance's column is its GPU's
        "gpu.0.util_pct",
        "gpu.0.power_w",
        "cpu.3.util_pct",
        "gpu.x.util_pct",
        "gpu",
        "gpu.4",
    ]
    assert gpu_labels(names) == [0, 2, 10]
    assert gpu_labels({"gpu.1.temp_c": 60.0}) == [1]  # any iterable of names (a dict's keys)
    assert list(gpu_columns(names, "power_w")) == [0, 10]
