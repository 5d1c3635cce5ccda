"""Benchmark 4: ``snapshot().to_arrow()`` of a full 1M-row ring against a plain memory copy.

The ring (capacity 1 << 20, default sources) is filled with ``run_ticks_inline``. The copy
baseline moves the same number of bytes as the resulting Arrow table holds (cells and validity
bitmaps) with ``np.copyto`` between two preallocated, already-touched arrays, the target's
yardstick. A second baseline copies into a freshly allocated array, which pays first-touch page
faults. Each timed snapshot is dropped before the next, so its buffer is free again and the next
snapshot copies into it (the sampler reuses the buffers of frames nobody holds any more): the
snapshot is timed as a warm copy, like the baseline. The untimed first snapshot is the one that
pays the page faults.

Run alone: ``python bench/bench_snapshot.py [--repeats 7]``.
"""

from __future__ import annotations

import gc
import time

import numpy as np
import stroboscope
from bench_common import (
    UNBUDGETED,
    BenchResult,
    OtherLoad,
    Row,
    fmt_bytes,
    fmt_ns,
    log,
    median,
    verdict,
)

ROWS = 1 << 20
TARGET_RATIO = 2.0


def run(repeats: int) -> BenchResult:
    """Fill the ring, then time ``repeats`` snapshots and as many copies; report medians."""
    res = BenchResult("4. snapshot of 1M rows to Arrow")
    s = stroboscope.Sampler(0.001, capacity=ROWS, **UNBUDGETED)
    log(f"bench 4: filling {ROWS:,} rows with run_ticks_inline (default sources)")
    fill_ns = s._core.run_ticks_inline(ROWS)
    st = s.stats()
    if st.rows_written < ROWS:
        raise RuntimeError(f"ring holds {st.rows_written} rows, expected {ROWS}")

    # A first snapshot (not timed) sizes the copy baseline: the bytes the Arrow table holds.
    table = s.snapshot().to_arrow()
    nbytes, n_rows, n_cols = table.nbytes, table.num_rows, table.num_columns
    del table
    src = np.ones(nbytes // 8, dtype=np.uint64)
    dst = np.zeros_like(src)  # zeros written: every page is touched before timing
    warm = np.empty_like(src)  # one untimed fresh copy, as the untimed snapshot above
    np.copyto(warm, src)
    del warm

    # Interleaved, so each ratio compares measurements taken moments apart.
    snap_ns: list[float] = []
    frame_ns: list[float] = []
    copy_ns: list[float] = []
    fresh_ns: list[float] = []
    for r in range(repeats):
        log(f"bench 4: snapshot {r + 1}/{repeats}")
        gc.collect()
        load = OtherLoad()
        t0 = time.perf_counter_ns()
        frame = s.snapshot()
        t1 = time.perf_counter_ns()
        table = frame.to_arrow()
        t2 = time.perf_counter_ns()
        snap_ns.append(t2 - t0)
        frame_ns.append(t1 - t0)
        del table, frame
        t0 = time.perf_counter_ns()
        np.copyto(dst, src)
        copy_ns.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        fresh = np.empty_like(src)
        np.copyto(fresh, src)
        fresh_ns.append(time.perf_counter_ns() - t0)
        del fresh
        res.other_cores.append(load.cores())
    s.close()
    del s, src, dst
    gc.collect()

    snap = median(snap_ns)
    copy = median(copy_ns)
    fresh_med = median(fresh_ns)
    ratios = [a / b for a, b in zip(snap_ns, copy_ns)]
    ratio = median(ratios)
    gbps = nbytes / snap
    res.raw = {
        "snapshot_ns": snap_ns,
        "snapshot_only_ns": frame_ns,
        "copy_ns": copy_ns,
        "fresh_copy_ns": fresh_ns,
        "bytes": nbytes,
        "rows": n_rows,
        "columns": n_cols,
        "fill_ns": fill_ns,
    }
    b = "4 snapshot 1M rows"
    res.rows += [
        Row(
            b,
            f"snapshot().to_arrow(), {fmt_bytes(nbytes)}",
            fmt_ns(snap),
            floor=f"{fmt_ns(copy)} (np.copyto)",
            ratio=f"snapshot/copy {ratio:.2f}x",
            target=f"≤ {TARGET_RATIO:.0f}x copy",
            verdict=verdict(ratio <= TARGET_RATIO),
        ),
        Row(
            b,
            "… vs copy into a fresh array",
            fmt_ns(snap),
            floor=fmt_ns(fresh_med),
            ratio=f"snapshot/fresh copy {snap / fresh_med:.2f}x",
        ),
    ]
    res.details += [
        f"{n_rows:,} rows x {n_cols} columns (time, mono_ns, metrics) = {fmt_bytes(nbytes)} "
        f"(cells + validity bitmaps, pyarrow Table.nbytes); snapshot moves {gbps:.2f} GB/s",
        f"of which snapshot() {fmt_ns(median(frame_ns))} (copy out of the ring into the "
        f"reused buffers, time column, null counts) and to_arrow() "
        f"{fmt_ns(median([a - b for a, b in zip(snap_ns, frame_ns)]))} (zero-copy import)",
        f"a copy into a fresh array pays first-touch page faults on {fmt_bytes(nbytes)}: "
        f"{fmt_ns(fresh_med - copy)} of its {fmt_ns(fresh_med)}",
        f"medians over {repeats} interleaved repeats; ratio = median of per-repeat ratios",
        f"filling the ring: {ROWS:,} inline ticks of the default sources took "
        f"{fill_ns / 1e9:.1f} s ({fmt_ns(fill_ns / ROWS)} per tick)",
    ]
    return res


if __name__ == "__main__":
    import argparse

    from bench_common import cpu_model

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    result = run(ap.parse_args().repeats)
    print(f"CPU: {cpu_model()}")
    for row in result.rows:
        print(row)
    for line in result.details:
        print(line)
