"""A recorded run with known values for the report tests: a Sampler on the fake /proc tree
(tests/_fake_proc.py) and the fake NVML library (tests/fake_nvml), written as Parquet with a
scope-intervals table beside it and provenance metadata.

Known by construction: ``cpu.util_pct`` is 25 % on every reading (user +1, idle +3 ticks per
row); ``net.sent_bytes`` rises 1000 and ``net.recv_bytes`` 500 per inline row; the GPU serves
util 42 %, 30e9 of 150e9 bytes, 65 °C, 250 W, 1755 MHz, no fan (NOT_SUPPORTED: an empty column).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
from _fake_proc import PID, FakeProc
from stroboscope import Sampler
from stroboscope.formats.writers import write_parquet

GPU_SCRIPT = """devices 1
driver 550.54.15
name 0 Fake H200
uuid 0 GPU-aaaaaaaa-0000-0000-0000-000000000000
set 0 util 42
set 0 mem_total 150000000000
set 0 mem_used 30000000000
set 0 temp 65
set 0 power 250000
set 0 sm_clock 1755
fail 0 fan NOT_SUPPORTED
"""
INLINE_ROWS = 200
SENT_PER_ROW = 1000
RECV_PER_ROW = 500

PROVENANCE = {  # the layout of stroboscope.sampling._provenance (format 1), plus a histogram
    "format": 1,
    "stroboscope_version": "0.1.0",
    "host": "testhost",
    "pid": PID,
    "cmdline": ["python", "train.py"],
    "interval_s": 0.001,
    "ticks_taken": 240,
    "ticks_missed": 3,
    "rows_lost": 0,
    "clock": {"anchor_ns": 1, "anchor_uncertainty_ns": 17, "clock": "CLOCK_MONOTONIC"},
    "sources": [{"name": "cpu", "every": 4, "interval_s": 0.004, "interface": "/proc/stat"}],
    "gpus": {"driver_version": "550.54.15", "devices": [], "reason": "fake NVML: 1 of 2 GPUs"},
    "missing": ["cmdline of the monitored process"],
    "lateness_histogram": {"upper_ns": [1000, 10000, 100000, 1000000], "counts": [5, 40, 7, 1]},
}


def record_run(directory: Path, nvml_library: Path) -> Path:
    """Record the run into ``directory`` and return the Parquet path (``run.parquet``, with
    ``run.scopes.parquet`` beside it). Sets the NVML variables for the sampler's life only."""
    script = directory / "nvml_script.txt"
    script.write_text(GPU_SCRIPT)
    saved = {k: os.environ.get(k) for k in ("STROBOSCOPE_NVML_LIBRARY", "FAKE_NVML_SCRIPT")}
    os.environ["STROBOSCOPE_NVML_LIBRARY"] = str(nvml_library)
    os.environ["FAKE_NVML_SCRIPT"] = str(script)
    fake = FakeProc(directory / "proc")
    try:
        s = Sampler(
            0.001,
            pid=PID,
            sources={"memory": None, "cpu": 0.004, "network": None, "process": None, "gpu": 0.002},
            cpu_window=0,
            rate_window=0,
            gpu_samples=False,
            proc_root=str(fake.root),
        )
        s.start()  # live until the GPU thread took a few readings (not: for a fixed time)
        deadline = time.monotonic() + 30
        while s.stats().source("gpu").reads < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        s.stop()
        for _ in range(INLINE_ROWS):  # then deterministic rows with known counters
            s.tick_now(1)
            fake.advance(user=1, idle=3, sent=SENT_PER_ROW, recv=RECV_PER_ROW)
        table = s.snapshot().to_arrow()
        s.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    meta = dict(table.schema.metadata or {})
    meta[b"stroboscope.provenance"] = json.dumps(PROVENANCE).encode()
    meta[b"stroboscope.rows_lost"] = b"0"
    table = table.replace_schema_metadata(meta)
    path = directory / "run.parquet"
    write_parquet(table, path)
    write_parquet(scope_intervals(table), directory / "run.scopes.parquet")
    return path


def scope_intervals(table: pa.Table) -> pa.Table:
    """Three ``step`` calls over rows [50, 90), [90, 130), [130, 170) of ``table`` (inline
    rows), an ``eval`` over the last 20 rows, and a ``train`` still open around the steps."""
    mono = table.column("mono_ns").to_pylist()
    n = len(mono)
    spans = [
        ("train", "train", 0, n - 150, None),
        ("step", "train/step", 1, n - 150, n - 110),
        ("step", "train/step", 1, n - 110, n - 70),
        ("step", "train/step", 1, n - 70, n - 30),
        ("eval", "eval", 0, n - 20, n - 1),
    ]
    rows = sorted(spans, key=lambda r: (mono[r[3]], r[2]))
    return pa.table(
        {
            "name": pa.array([r[0] for r in rows], pa.string()),
            "path": pa.array([r[1] for r in rows], pa.string()),
            "thread_id": pa.array([1234] * len(rows), pa.int64()),
            "stack_id": pa.array([1] * len(rows), pa.uint64()),
            "depth": pa.array([r[2] for r in rows], pa.int32()),
            "begin_ns": pa.array([mono[r[3]] for r in rows], pa.int64()),
            "end_ns": pa.array([None if r[4] is None else mono[r[4]] for r in rows], pa.int64()),
        }
    )
