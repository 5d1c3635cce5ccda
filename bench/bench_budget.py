"""The overhead budget: every available source forced to 1 kHz, with and without
``max_overhead``, beside the bare wake and the naive C sampler at the same rate, in one run.

Rows (each over the same wall time, run one after another so they do not share the CPUs):

- bare wake: ``floor --variant none``, a C thread that only sleeps to 1 ms deadlines and wakes;
- naive C sampler: ``floor --variant seed``, the same plus pread of 5 /proc files and statvfs;
- stroboscope, every source at 1 kHz, no budget (``max_overhead=None``);
- stroboscope, every source at 1 kHz, ``max_overhead=0.02``: the target is its threads' CPU
  (``stats().threads_cpu_ns``: the sampler thread and any poll thread) <= 2.2 % of one core over
  the whole run, with every rate change in ``stats()``: the log replayed from each source's first
  interval gives its interval now, and the count equals the entries kept.

The C processes' CPU is their utime + stime from /proc (10 ms ticks: 0.02 % of a core over 60 s).

Usage: python bench/bench_budget.py [--seconds 60] [--budget 0.02] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import stroboscope
from bench_common import Floor, OtherLoad, cpu_model, log, machine
from stroboscope.sampling import available_sources

TARGET_SHARE = 0.022


def _proc_cpu_s(pid: int) -> float:
    """utime + stime of a process so far, in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _c_row(floor: Floor, variant: str, seconds: float) -> dict[str, Any]:
    proc = floor.start_timer(1_000_000, variant, seconds=seconds + 5)
    time.sleep(0.2)  # past its start-up
    cpu0, t0 = _proc_cpu_s(proc.pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = _proc_cpu_s(proc.pid), time.monotonic()
    out = floor.stop_timer(proc)
    return {"share": (cpu1 - cpu0) / (t1 - t0), "ticks_taken": out["ticks_taken"]}


def _strobo_row(names: list[str], seconds: float, budget: float | None) -> dict[str, Any]:
    s = stroboscope.Sampler(0.001, sources={n: 0.001 for n in names}, max_overhead=budget)
    with s:
        t0 = time.monotonic()
        before = s.stats().threads_cpu_ns
        time.sleep(seconds)
        st = s.stats()
        wall = time.monotonic() - t0
    share = (st.threads_cpu_ns - before) / (wall * 1e9)
    # Every change visible: replaying the kept log from the first intervals gives the intervals
    # now, and none was dropped from the log (at most 256 are kept).
    now = {x.name: x.first_interval_ns for x in st.sources}
    for c in st.rate_changes:
        assert now[c.source] == c.old_interval_ns, c
        now[c.source] = c.new_interval_ns
    replayed = all(now[x.name] == x.interval_ns for x in st.sources)
    complete = st.rate_changes_total == len(st.rate_changes)
    return {
        "share": share,
        "ticks_taken": st.ticks_taken,
        "ticks_missed": st.ticks_missed,
        "rate_changes": st.rate_changes_total,
        "beyond_resolution": sum(
            c.reason == "over_budget_beyond_resolution" for c in st.rate_changes
        ),
        "raised": sum(c.reason == "room" for c in st.rate_changes),
        "every_change_visible": replayed and complete,
        "budget_unmet": st.budget_unmet,
        "intervals_ms": {x.name: x.interval_ns / 1e6 for x in st.sources},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--budget", type=float, default=0.02)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = [s["name"] for s in available_sources() if s["available"]]
    floor = Floor()
    rows: dict[str, dict[str, Any]] = {}
    others: list[float] = []
    runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("bare wake (C)", lambda: _c_row(floor, "none", args.seconds)),
        ("naive C sampler", lambda: _c_row(floor, "seed", args.seconds)),
        ("stroboscope, no budget", lambda: _strobo_row(names, args.seconds, None)),
        (
            f"stroboscope, max_overhead={args.budget:g}",
            lambda: _strobo_row(names, args.seconds, args.budget),
        ),
    ]
    try:
        for name, run in runs:
            log(f"{name}: {len(names)} sources, 1 kHz, {args.seconds:g} s")
            load = OtherLoad()
            rows[name] = run()
            rows[name]["other_cores"] = load.cores()
            others.append(rows[name]["other_cores"])
    finally:
        floor.close()
    budgeted = rows[f"stroboscope, max_overhead={args.budget:g}"]
    ok = budgeted["share"] <= TARGET_SHARE and budgeted["every_change_visible"]
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows, "pass": ok}, indent=1))
        return 0
    wake = rows["bare wake (C)"]["share"]
    naive = rows["naive C sampler"]["share"]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; sources: {', '.join(names)}")
    print(
        f"{args.seconds:g} s per row at 1 kHz; other processes used {min(others):.2f}-"
        f"{max(others):.2f} cores of {os.cpu_count()} during the rows"
    )
    print()
    print("| row | CPU (share of one core) | / bare wake | / naive C | rate changes |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        changes = (
            f"{r['rate_changes']} ({r['beyond_resolution']} past a resolution, {r['raised']} "
            f"raised), all in stats(): {r['every_change_visible']}"
            if "rate_changes" in r
            else "—"
        )
        print(
            f"| {name} | {r['share']:.2%} | {r['share'] / wake:.2f}x | {r['share'] / naive:.2f}x "
            f"| {changes} |"
        )
    print()
    print(
        f"target: max_overhead={args.budget:g} keeps the sampler's CPU <= {TARGET_SHARE:.1%} of a "
        f"core over the run, every change visible: {'PASS' if ok else 'MISS'}"
    )
    print(f"intervals at the end (ms): {budgeted['intervals_ms']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
