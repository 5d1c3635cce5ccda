"""Cost of a spooled sample against an in-memory one (issue: crash-safe recording).

Both samplers read the same sources; ``run_ticks_inline(n)`` runs n back-to-back ticks on the
calling thread (no sleeping), so the difference is the ring living in a MAP_SHARED file instead of
anonymous memory. Rounds alternate the two to cancel drift; the ratio is the median of per-round
ratios. Target: spooled <= 1.1x in-memory.

    python bench/spool_bench.py [--rounds 9] [--ticks 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import stroboscope

SOURCES = ["cpu", "memory", "network", "disk", "diskio", "process"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ticks", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mem = stroboscope.Sampler(0.001, sources=SOURCES, cpu_window=0, capacity=1 << 16)
        spooled = stroboscope.Sampler(
            0.001,
            sources=SOURCES,
            cpu_window=0,
            capacity=1 << 16,
            spool=Path(tmp) / "bench.spool",
            segment_seconds=10,
        )
        for s in (mem, spooled):  # warm up: touch every ring page once
            s._core.run_ticks_inline(1 << 16)
        mem_ns: list[float] = []
        spool_ns: list[float] = []
        for r in range(args.rounds):
            order = (mem, spooled) if r % 2 == 0 else (spooled, mem)
            for s in order:
                ns = s._core.run_ticks_inline(args.ticks) / args.ticks
                (mem_ns if s is mem else spool_ns).append(ns)
        ratios = [b / a for a, b in zip(mem_ns, spool_ns)]
        ratio = statistics.median(ratios)
        print(f"in-memory ring: {statistics.median(mem_ns) / 1e3:.2f} µs per sample")
        print(f"spooled ring:   {statistics.median(spool_ns) / 1e3:.2f} µs per sample")
        print(
            f"spooled / in-memory: {ratio:.3f}x (target <= 1.1x): "
            f"{'PASS' if ratio <= 1.1 else 'MISS'}"
        )
        mem.close()
        spooled.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
