"""The report page's flame graph of a long run: how much of the page the stacks take, how wide
its time buckets are, and how long they take to build and how much memory (python
bench/flame_bench.py [--seconds 3600] [--threads 8] [--rate 1000] [--phase-ms 50]).

The run is synthetic: ``threads`` threads sampled at every tick of ``rate`` Hz for ``seconds``,
2,000 distinct stacks 5 to 40 frames deep (300 function names), each thread's stack drawn at
each sample from 20 stacks that change every ``phase-ms`` (a program moving through its phases),
its CPU time since its previous sample random; the rows carry a GPU's power and the process's
CPU (two weights besides ``cpu`` and ``wall``), and one scope ("step", 300 ms of every second,
on the first thread) adds its own table.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pyarrow as pa
from bench_common import cpu_model
from stroboscope.export._flame import flame_data
from stroboscope.export._page_data import Blob
from stroboscope.export._recording import Recording

T0 = 1_790_000_000_000_000_000


def run(seconds: int, threads: int, rate: int, phase_ms: int = 50) -> dict[str, float]:
    rng = np.random.default_rng(0)
    ticks = seconds * rate
    step = 1_000_000_000 // rate
    mono = 1_000_000_000 + np.arange(ticks, dtype=np.int64) * step
    meta = {"proc.cpu_pct": b"%", "gpu.0.power_w": b"W"}
    fields = [pa.field("time", pa.timestamp("ns", "UTC")), pa.field("mono_ns", pa.int64())]
    fields += [
        pa.field(n, pa.float64(), metadata={b"unit": u, b"kind": b"gauge"}) for n, u in meta.items()
    ]
    rows = pa.Table.from_arrays(
        [
            pa.array(mono + T0, pa.timestamp("ns", "UTC")),
            pa.array(mono),
            pa.array(rng.random(ticks) * 100),
            pa.array(100 + rng.random(ticks) * 200),
        ],
        schema=pa.schema(fields),
    )
    n = ticks * threads
    k = 2000
    phase = max(phase_ms * rate // 1000, 1) * threads  # samples of one phase
    stack = (np.arange(n) // phase * 7 + rng.integers(0, 20, n)) % k
    samples = pa.table(
        {
            "mono_ns": np.repeat(mono, threads),
            "pid": np.full(n, 7, np.int32),
            "tid": np.tile(np.arange(threads, dtype=np.int32) + 100, ticks),
            "stack_id": stack.astype(np.int32),
            "cpu_ns": rng.integers(0, step, n),
            "thread": pa.nulls(n, pa.string()),
        }
    )
    del stack
    depth = rng.integers(5, 40, k)
    names = [f"fn_{i}" for i in range(300)]
    frame_rows = [(s, d, names[rng.integers(0, 300)]) for s in range(k) for d in range(depth[s])]
    frames = pa.table(
        {
            "stack_id": pa.array([r[0] for r in frame_rows], pa.int32()),
            "depth": pa.array([r[1] for r in frame_rows], pa.int32()),
            "function": [r[2] for r in frame_rows],
            "file": ["prog.py"] * len(frame_rows),
            "line": pa.array([1] * len(frame_rows), pa.int32()),
        }
    )
    begins = mono[0] + np.arange(seconds, dtype=np.int64) * 1_000_000_000
    scopes = pa.table(
        {
            "name": ["step"] * seconds,
            "path": ["step"] * seconds,
            "thread_id": pa.array([100] * seconds, pa.int64()),
            "stack_id": pa.array([100] * seconds, pa.uint64()),
            "depth": pa.array([0] * seconds, pa.int32()),
            "begin_ns": pa.array(begins),
            "end_ns": pa.array(begins + 300_000_000),
        }
    )
    s = Recording("run", "run.parquet", rows, {}, scopes)
    blob = Blob()
    t0 = time.perf_counter()
    data = flame_data(blob, s, 0, T0 + int(mono[0]), (samples, frames))
    built = time.perf_counter() - t0
    assert data is not None
    packed = len(blob.packed())
    return {
        "samples": n,
        "build_s": built,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bucket_ms": data["bucket_us"] / 1000,
        "entries": sum(t["stack"]["n"] for t in data["tables"]),
        "weights": len(data["weights"]),
        "nodes": data["tree"]["parent"]["n"],
        "compressed_mib": packed / 2**20,
        "in_page_mib": packed * 4 / 3 / 2**20,  # base64
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--phase-ms", type=int, default=50)
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}")
    print(
        f"{args.seconds} s x {args.threads} threads x {args.rate} Hz of stacks, "
        f"20 stacks changing every {args.phase_ms} ms:"
    )
    for key, value in run(args.seconds, args.threads, args.rate, args.phase_ms).items():
        print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")


if __name__ == "__main__":
    main()
