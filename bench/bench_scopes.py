"""Time the scope analysis on synthetic tables: samples_by_scope and summary on 1M samples and
100k scope calls (two threads, nesting depth 3), and the trace writers on a 10-minute 1 kHz run.

Run: ``python bench/bench_scopes.py`` (numbers go to bench/RESULTS.md with the machine).
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import pyarrow as pa
from stroboscope.analysis.scopes import samples_by_scope, summary
from stroboscope.export.traces import write_chrome_trace, write_perfetto_trace

ANCHOR = 1_790_000_000_000_000_000


def tables(samples: int, calls: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    mono = np.arange(samples, dtype=np.int64) * 1_000_000  # 1 kHz
    frame = pa.table(
        {
            "time": pa.array(mono + ANCHOR, pa.timestamp("ns", tz="UTC")),
            "mono_ns": mono,
            "proc.cpu_pct": rng.uniform(0, 100, samples),
            "proc.rss_bytes": rng.integers(1 << 20, 1 << 30, samples),
            "gpu.0.util_pct": rng.uniform(0, 100, samples),
            "gpu.0.power_w": rng.uniform(100, 700, samples),
            "gpu.0.energy_mj": np.cumsum(rng.uniform(100, 700, samples)),
        }
    )
    # per thread: outer calls of equal length, each with a child holding a grandchild
    per_thread = calls // 2 // 3
    span = samples * 1_000_000 // per_thread
    rows: dict[str, list[object]] = {
        k: [] for k in ("name", "path", "thread_id", "stack_id", "depth")
    }
    begin: list[np.ndarray] = []
    end: list[np.ndarray] = []
    for thread in (1, 2):
        b0 = np.arange(per_thread, dtype=np.int64) * span + thread * 1000
        for depth, (name, path) in enumerate(
            (("step", "step"), ("fwd", "step/fwd"), ("mm", "step/fwd/mm"))
        ):
            begin.append(b0 + depth * span // 8)
            end.append(b0 + span - 1 - depth * span // 8)
            rows["name"] += [name] * per_thread
            rows["path"] += [path] * per_thread
            rows["thread_id"] += [thread] * per_thread
            rows["stack_id"] += [thread] * per_thread
            rows["depth"] += [depth] * per_thread
    b, e = np.concatenate(begin), np.concatenate(end)
    order = np.argsort(b, kind="stable")
    iv = pa.table(
        {
            "name": pa.array(rows["name"]).take(order),
            "path": pa.array(rows["path"]).take(order),
            "thread_id": pa.array(rows["thread_id"], pa.int64()).take(order),
            "stack_id": pa.array(rows["stack_id"], pa.uint64()).take(order),
            "depth": pa.array(rows["depth"], pa.int32()).take(order),
            "begin_ns": pa.array(b[order]),
            "end_ns": pa.array(e[order]),
            "step": pa.array([str(i % 7) for i in range(len(b))]),
        }
    )
    return frame, iv


def timed(label: str, fn: object, *args: object, **kwargs: object) -> object:
    t = time.perf_counter()
    out = fn(*args, **kwargs)  # type: ignore[operator]
    print(f"{label:<48} {time.perf_counter() - t:8.2f} s")
    return out


def main() -> None:
    frame, iv = tables(1_000_000, 100_002)
    print(f"samples {frame.num_rows:,}, scope calls {iv.num_rows:,}")
    joined = timed("samples_by_scope (per stack)", samples_by_scope, frame, iv)
    print(f"  -> {joined.num_rows:,} rows")  # type: ignore[attr-defined]
    timed("samples_by_scope (per sample)", samples_by_scope, frame, iv, per="sample")
    timed("summary", summary, frame, iv)
    run, calls = tables(600_000, 6_000)  # 10 minutes at 1 kHz
    with tempfile.TemporaryDirectory() as d:
        for label, fn, name in (
            ("write_chrome_trace (10 min, 1 kHz, 5 columns)", write_chrome_trace, "t.json"),
            ("write_perfetto_trace (same)", write_perfetto_trace, "t.pftrace"),
        ):
            path = os.path.join(d, name)
            timed(label, fn, path, run, calls)
            print(f"  -> {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
