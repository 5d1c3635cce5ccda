"""Helpers for the tests that drive the fake NVML library (tests/fake_nvml) through samplers."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
from stroboscope import Sampler

ScriptFn = Callable[..., None]


def script_fixture(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ScriptFn]:
    """The body of an ``nvml`` fixture: call it with a script text (and optionally
    ``library="old"``) before building samplers."""

    def use(script: str, library: str = "new") -> None:
        gc.collect()  # the library re-reads its script once every holder is gone
        path = tmp_path / f"script{len(list(tmp_path.iterdir()))}.txt"
        path.write_text(script)
        monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs[library]))
        monkeypatch.setenv("FAKE_NVML_SCRIPT", str(path))

    yield use
    gc.collect()


def record_readings(sampler: Sampler, column: str, count: int, timeout: float = 60.0) -> pa.Table:
    """Runs ``sampler`` until ``column`` has ``count`` non-null cells (not: for a fixed time)."""
    with sampler:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cells = sampler.snapshot().to_arrow().column(column)
            if len(cells) - cells.null_count >= count:
                break
            time.sleep(0.01)
    return sampler.snapshot().to_arrow()


def values(table: pa.Table, name: str) -> list[float]:
    """The non-null cells of the numeric column ``name``, in row order."""
    cells: list[float] = table.column(name).drop_null().to_pylist()
    return cells
