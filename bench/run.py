"""Run the stroboscope benchmark suite and print a table of results.

Every benchmark measures stroboscope side by side, in the same run, with a psutil-based sampler
collecting the same values and, where it applies, with a raw ``pread`` loop in C over the same
/proc files (the floor, ``bench/floor.c``, compiled here with ``cc -O2`` into a temp dir):

1. cost of one sample of the seed metric set;
2. 1 kHz while the main Python thread runs CPU-bound work (ticks taken, lateness, slowdown);
3. 10 kHz with the process source alone;
4. ``snapshot().to_arrow()`` of 1M rows against a plain memory copy of as many bytes;
5. RSS over a long run at 1 kHz with a consumer draining every second (10 minutes by default).

Usage::

    python bench/run.py                   # everything, including the 10-minute soak
    python bench/run.py --quick           # fewer repeats and a 30 s soak (smoke run)
    python bench/run.py --only 1,2 --json results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import bench_common
import bench_cost
import bench_precise
import bench_rate
import bench_snapshot
import bench_soak
from bench_common import BenchResult, Floor, Row, log

COLUMNS = ("benchmark", "measured", "stroboscope", "psutil", "floor", "ratio", "target", "result")


def _cells(row: Row) -> tuple[str, ...]:
    return (
        row.bench,
        row.measure,
        row.strobo,
        row.psutil,
        row.floor,
        row.ratio,
        row.target,
        row.verdict,
    )


def format_table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    cells = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = []
    for k, c in enumerate(cells):
        lines.append("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown(rows: list[Row]) -> str:
    """The rows as a Markdown table (for bench/RESULTS.md)."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(
        description="stroboscope benchmarks: side by side with psutil and the raw-read floor."
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke run: fewer repeats, shorter runs, a 30 s soak"
    )
    p.add_argument(
        "--soak-seconds",
        type=float,
        default=None,
        help="length of the RSS soak of benchmark 5 (default 600, 30 with --quick)",
    )
    p.add_argument(
        "--only",
        default="1,2,3,4,5",
        help="comma-separated benchmark numbers to run (default all: 1,2,3,4,5)",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write every raw number and the machine description to this file",
    )
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = p.parse_args(argv)
    if args.soak_seconds is None:
        args.soak_seconds = 30.0 if args.quick else 600.0
    if args.soak_seconds < 2:
        p.error("--soak-seconds must be at least 2 (the baseline is taken after 1 s)")
    try:
        args.only = {int(x) for x in args.only.split(",") if x.strip()}
    except ValueError:
        p.error(f"--only takes benchmark numbers 1-5 separated by commas, got {args.only!r}")
    if not args.only or not args.only <= {1, 2, 3, 4, 5}:
        p.error(f"--only takes benchmark numbers 1-5, got {sorted(args.only)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks; print the table, details and machine. Returns 0."""
    args = parse_args(argv)
    quick = args.quick
    started = time.monotonic()
    machine = bench_common.machine()
    results: list[BenchResult] = []
    floor = Floor()
    if floor.error:
        log(f"floor unavailable: {floor.error}")
    try:
        if 1 in args.only:
            results.append(
                bench_cost.run(
                    floor, rounds=3 if quick else 9, seconds_per_round=0.3 if quick else 0.6
                )
            )
        if 2 in args.only:
            results.append(
                bench_rate.run_busy(
                    floor, repeats=3 if quick else 7, work_seconds=1.0 if quick else 2.5
                )
            )
        if 3 in args.only:
            results.append(
                bench_rate.run_10khz(
                    floor, repeats=1 if quick else 3, seconds=2.0 if quick else 3.0
                )
            )
            results.append(
                bench_precise.run_precise(
                    floor, repeats=1 if quick else 3, seconds=2.0 if quick else 3.0
                )
            )
        if 4 in args.only:
            results.append(bench_snapshot.run(repeats=3 if quick else 5))
        if 5 in args.only:
            results.append(bench_soak.run(args.soak_seconds))
    finally:
        floor.close()

    rows = [r for res in results for r in res.rows]
    print(format_table(rows))
    print()
    for res in results:
        print(f"{res.name}:")
        for line in res.details:
            print(f"  {line}")
        print(f"  {res.contention()}")
    print()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()))
    print(
        f"command: python bench/run.py {' '.join(argv if argv is not None else sys.argv[1:])}"
        f"   (took {time.monotonic() - started:.0f} s)"
    )
    missed = [f"{r.bench}: {r.measure}" for r in rows if r.verdict == "MISS"]
    print(
        f"targets: {sum(r.verdict == 'PASS' for r in rows)} PASS, {len(missed)} MISS"
        + (f" ({'; '.join(missed)})" if missed else "")
    )
    if args.markdown:
        print()
        print(format_markdown(rows))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "results": [asdict(res) for res in results],
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
