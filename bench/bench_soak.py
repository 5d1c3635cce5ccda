"""Benchmark 5: resident memory over a long run at 1 kHz.

A fresh Python process (so the other benchmarks' allocations do not blur its RSS) runs a
sampler with the default sources at 1 kHz and, like a real consumer, drains it every second,
turns the frame into a pyarrow Table and drops it. RSS (from /proc/self/statm) after the first
second is the baseline; the growth at the end must stay within 1 MiB.

Run alone: ``python bench/bench_soak.py --seconds 30`` prints the raw numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench_common import (
    BENCH_DIR,
    UNBUDGETED,
    BenchResult,
    OtherLoad,
    Row,
    fmt_bytes,
    log,
    rss_bytes,
    verdict,
)

TARGET_GROWTH_BYTES = 1 << 20


def soak(seconds: float, progress: bool = True) -> dict[str, Any]:
    """Run the soak in this process; returns baseline/end/max RSS, a trace and sampler stats."""
    import stroboscope

    s = stroboscope.Sampler(0.001, **UNBUDGETED)
    s.start()
    t0 = time.monotonic()
    rows = lost = 0
    baseline = peak = rss = 0
    trace: list[tuple[float, int]] = []
    trace_every = max(1, round(seconds / 20))
    k = 0
    while True:
        k += 1
        deadline = t0 + k
        time.sleep(max(0.0, deadline - time.monotonic()))
        frame = s.drain()
        table = frame.to_arrow()
        rows += table.num_rows
        lost += frame.rows_lost
        del table, frame
        rss = rss_bytes()
        if k == 1:
            baseline = rss
        peak = max(peak, rss)
        if k % trace_every == 0 or k == 1:
            trace.append((round(time.monotonic() - t0, 1), rss))
            if progress:
                log(f"bench 5: {k:>4} s, RSS {fmt_bytes(rss)} ({fmt_bytes(rss - baseline)} vs 1 s)")
        if k >= seconds:
            break
    end = rss  # after the last drain, sampler still running
    s.stop()
    after_stop = rss_bytes()
    st = s.stats()
    s.close()
    return {
        "seconds": seconds,
        "rss_baseline": baseline,
        "rss_end": end,
        "rss_peak": peak,
        "rss_after_stop": after_stop,
        "trace": trace,
        "rows_drained": rows,
        "rows_lost": lost,
        "ticks_taken": st.ticks_taken,
        "ticks_scheduled": st.ticks_scheduled,
        "ring_bytes": st.ring_bytes,
        "sources": [src.name for src in st.sources],
    }


def run(seconds: float) -> BenchResult:
    """Run the soak in a child process and turn its numbers into table rows."""
    res = BenchResult("5. memory over a long run")
    log(f"bench 5: soak for {seconds:g} s in a fresh process")
    load = OtherLoad()
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / "bench_soak.py"), "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    raw: dict[str, Any] = json.loads(proc.stdout)
    res.other_cores.append(load.cores())
    growth = raw["rss_end"] - raw["rss_baseline"]
    res.raw = raw
    taken_pct = 100.0 * raw["ticks_taken"] / max(1, raw["ticks_scheduled"])
    res.rows.append(
        Row(
            "5 RSS soak",
            f"RSS growth, 1 s → {seconds:g} s at 1 kHz",
            fmt_bytes(growth),
            target=f"≤ {fmt_bytes(TARGET_GROWTH_BYTES)}",
            verdict=verdict(growth <= TARGET_GROWTH_BYTES),
        )
    )
    res.details += [
        f"RSS after 1 s {fmt_bytes(raw['rss_baseline'])}, at end {fmt_bytes(raw['rss_end'])}, "
        f"peak {fmt_bytes(raw['rss_peak'])}, after stop() {fmt_bytes(raw['rss_after_stop'])} "
        f"(ring {fmt_bytes(raw['ring_bytes'])}, prefaulted at construction)",
        f"drained every 1 s into a pyarrow Table and dropped: {raw['rows_drained']:,} rows, "
        f"{raw['rows_lost']} lost; ticks taken {raw['ticks_taken']:,}/{raw['ticks_scheduled']:,} "
        f"({taken_pct:.2f} %); sources: {', '.join(raw['sources'])}",
        "RSS trace (s: growth vs 1 s): "
        + ", ".join(f"{t:g}: {fmt_bytes(r - raw['rss_baseline'])}" for t, r in raw["trace"]),
    ]
    return res


def main() -> None:
    """Entry point of the child process: run the soak and print JSON to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the soak (s)")
    args = parser.parse_args()
    print(json.dumps(soak(args.seconds)))


if __name__ == "__main__":
    main()
