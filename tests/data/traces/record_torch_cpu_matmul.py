"""Record the torch_cpu_matmul fixture (run once, by hand; needs torch, which CI does not install).

    PYTHONPATH=python python tests/data/traces/record_torch_cpu_matmul.py tests/data/traces

Writes a torch.profiler Chrome trace, the Sampler frame recorded during it, and one scope
interval per step (time.monotonic_ns() edges) with the frame's clock anchor in its metadata.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from stroboscope import Sampler
from torch.profiler import ProfilerActivity, profile


def main(out: str) -> None:
    torch.manual_seed(0)
    a = torch.randn(256, 256)
    tid = threading.get_native_id()
    steps: list[tuple[int, int]] = []
    s = Sampler(0.001, sources=["cpu", "process"])
    with s:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                begin = time.monotonic_ns()
                for _ in range(20):
                    a = torch.matmul(a, a).tanh()
                steps.append((begin, time.monotonic_ns()))
                time.sleep(0.003)
        time.sleep(0.01)
    frame = s.snapshot().to_arrow()
    prof.export_chrome_trace(os.path.join(out, "torch_cpu_matmul.json"))
    n = len(steps)
    intervals = pa.table(
        {
            "name": pa.array(["step"] * n),
            "path": pa.array(["step"] * n),
            "thread_id": pa.array([tid] * n, pa.int64()),
            "stack_id": pa.array([tid] * n, pa.uint64()),
            "depth": pa.array([0] * n, pa.int32()),
            "begin_ns": pa.array([b for b, _ in steps], pa.int64()),
            "end_ns": pa.array([e for _, e in steps], pa.int64()),
            "step": pa.array([str(k) for k in range(n)]),
        }
    )
    time_ns = frame.column("time").cast(pa.int64())[0].as_py()
    anchor = int(time_ns) - int(frame.column("mono_ns")[0].as_py())
    intervals = intervals.replace_schema_metadata(
        {b"stroboscope.anchor_realtime_ns": str(anchor).encode()}
    )
    pq.write_table(intervals, os.path.join(out, "torch_cpu_matmul.intervals.parquet"))
    pq.write_table(frame, os.path.join(out, "torch_cpu_matmul.samples.parquet"))
    print(torch.__version__, frame.num_rows)


if __name__ == "__main__":
    main(sys.argv[1])
