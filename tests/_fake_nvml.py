"""Helpers for the tests that drive the fake NVML library (tests/fake_nvml) through samplers."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa
from stroboscope import Sampler

ScriptFn = Callable[..., Path]
"""The ``nvml`` and ``amd`` fixtures (tests/conftest.py): call with a script; returns its path."""


def fake_calls(function: str, device: int = 0) -> int:
    """How many times the fake NVML library (the one STROBOSCOPE_NVML_LIBRARY names, already
    loaded by the core) has served ``function`` on ``device`` since its script was loaded."""
    lib = ctypes.CDLL(os.environ["STROBOSCOPE_NVML_LIBRARY"])
    lib.fake_nvml_calls.restype = ctypes.c_ulonglong
    lib.fake_nvml_calls.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    return int(lib.fake_nvml_calls(device, function.encode()))


def record_reads(
    sampler: Sampler,
    count: int,
    function: str = "nvmlDeviceGetTemperature",
    timeout: float = 60.0,
) -> pa.Table:
    """Runs ``sampler`` until GPU 0 has served ``function`` ``count`` more times (the gpu
    source makes one nvmlDeviceGetTemperature call per read, gpu_gpm one nvmlGpmSampleGet per
    sample), not for a fixed time; returns its rows.

    Progress is watched through the fake's call counts, not ``snapshot()``: a snapshot's
    provenance calls ``gpu_status()``, whose probing read would take scripted values.
    """
    with sampler:
        start = fake_calls(function)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fake_calls(function) - start >= count:
                break
            time.sleep(0.01)
    return sampler.snapshot().to_arrow()


def fake_counter(name: str, device: int) -> int:
    """One of the fake's GPM counters for assertions: ``fake_nvml_gpm_close_pairs`` (pairs
    less than 100 ms apart) or ``fake_nvml_gpm_min_gap_ns`` (-1 before the first pair)."""
    lib = ctypes.CDLL(os.environ["STROBOSCOPE_NVML_LIBRARY"])
    fn = getattr(lib, name)
    fn.restype = ctypes.c_longlong
    fn.argtypes = [ctypes.c_uint]
    return int(fn(device))


def values(table: pa.Table, name: str) -> list[float]:
    """The non-null cells of the numeric column ``name``, in row order."""
    cells: list[float] = table.column(name).drop_null().to_pylist()
    return cells


def read_times(table: pa.Table, column: str) -> list[int]:
    """The read time of each row of ``table`` (already filtered to the rows to use) for the GPU
    column ``column``: its GPU's own (``gpu.{i}.read_mono_ns``) where the frame has it, as the
    analysis times GPU readings, else the poll's (``gpu.read_mono_ns``)."""
    own = f"gpu.{column.split('.')[1]}.read_mono_ns"
    name = own if own in table.column_names else "gpu.read_mono_ns"
    times: list[int] = table.column(name).to_pylist()
    return times


def readings(table: pa.Table, column: str) -> tuple[list[int], list[float]]:
    """The valid readings of GPU column ``column``: their read times (:func:`read_times`) and
    values, for hand computations."""
    rows = table.filter(table.column(column).is_valid())
    return read_times(rows, column), [float(x) for x in rows.column(column).to_pylist()]


def hand_trapezoid(t: list[int], p: list[float], a: float, b: float) -> float:
    """The integral (W·ns) of the piecewise-linear power through (t, p) over [a, b]."""

    def at(x: float) -> float:
        k = max(i for i in range(len(t)) if t[i] <= x)
        if k == len(t) - 1:
            return p[k]
        return p[k] + (p[k + 1] - p[k]) * (x - t[k]) / (t[k + 1] - t[k])

    cuts = [a, *[x for x in t if a < x < b], b]
    return sum((y - x) * (at(x) + at(y)) / 2 for x, y in zip(cuts, cuts[1:]))
