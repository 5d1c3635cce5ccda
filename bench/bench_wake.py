"""Cost against the cost of waking: the default set at 1 kHz beside a bare wake thread and a naive C
sampler, all in this one process.

Every row runs as a thread of this process, the way stroboscope's sampler thread does:

- **bare wake**: a C thread (``bench/floor.c`` built as a library, called through ctypes, which
  releases the GIL) that sleeps to absolute 1 kHz deadlines and reads nothing: what any sampler
  that sleeps between ticks pays here;
- **naive C sampler**: the same thread preading 6 files (/proc/stat, meminfo, net/dev,
  /proc/self/stat, statm) and a statvfs("/") on every tick;
- **psutil thread**: a Python thread asking psutil for the same values at 1 kHz;
- **stroboscope**: ``Sampler(0.001)`` with the default sources.

Figures: process CPU per tick, the main thread asleep (all-in); the work above the wake (all-in
minus the bare wake's); stroboscope's work above the wake over the naive sampler's (issue 22:
≤ 0.3x); stroboscope's per-source cost from ``stats()`` (ns per read and ns per tick). Then the
process source alone at 10 kHz beside the wake and the naive process reads at 10 kHz, and 1 kHz
beside a busy Python main thread: ticks taken by stroboscope and by the naive C sampler thread
under the same GIL, and the workload's slowdown.

Usage::

    python bench/bench_wake.py [--rounds 5] [--seconds 2] [--json out.json]

Rounds interleave the rows, so drift on a shared machine hits all alike; medians of rounds, and
ratios taken within each round.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import stroboscope
from bench_common import UNBUDGETED, OtherLoad, cpu_model, log, process_cpu_ns
from bench_rate import busy_loop, calibrate
from psutil_baseline import psutil_thread_cost

BENCH_DIR = Path(__file__).resolve().parent
TARGET_ABOVE_WAKE = 0.3  # stroboscope's work above the wake over the naive sampler's
TARGET_ALL_IN_WAKE = 1.15  # stroboscope's all-in over the bare wake's


class FloorLib:
    """``bench/floor.c`` built as a shared library: the timer loop on a thread of this process."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="stroboscope-floorlib-")
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise RuntimeError("no C compiler (cc) found")
        so = Path(self._dir.name) / "libfloor.so"
        subprocess.run(
            [
                cc,
                "-O2",
                "-shared",
                "-fPIC",
                "-DFLOOR_LIBRARY",
                "-o",
                str(so),
                BENCH_DIR / "floor.c",
            ],
            check=True,
        )
        self.lib = ctypes.CDLL(str(so))
        self.lib.floor_thread_run.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_longlong,
            ctypes.c_double,
            ctypes.POINTER(ctypes.c_longlong),
        ]
        self.lib.floor_thread_run.restype = ctypes.c_int

    def start(
        self, variant: str, tick_ns: int, seconds: float
    ) -> tuple[threading.Thread, dict[str, Any]]:
        """Start the loop on a new thread; the dict is filled when the thread ends."""
        out: dict[str, Any] = {}

        def body() -> None:
            vals = (ctypes.c_longlong * 8)()
            rc = self.lib.floor_thread_run(variant.encode(), b"self", tick_ns, seconds, vals)
            if rc != 0:
                out["error"] = rc
                return
            keys = ("taken", "missed", "p50_ns", "p99_ns", "max_ns", "cost_ns", "cpu_ns", "wall")
            out.update(zip(keys, list(vals)))

        t = threading.Thread(target=body, name=f"floor-{variant}")
        t.start()
        return t, out

    def run(self, variant: str, tick_ns: int, seconds: float) -> dict[str, Any]:
        """Run the loop for ``seconds`` with the main thread asleep: process CPU per tick too."""
        c0 = process_cpu_ns()
        t, out = self.start(variant, tick_ns, seconds)
        t.join()
        out["all_in_ns"] = (process_cpu_ns() - c0) / max(1, out.get("taken", 0))
        return out

    def close(self) -> None:
        self._dir.cleanup()


def _strobo(interval: float, seconds: float, sources: Any = None) -> dict[str, Any]:
    """A sampler for ``seconds``, the main thread asleep: all-in CPU per tick and per source."""
    kw: dict[str, Any] = {} if sources is None else {"sources": sources}
    s = stroboscope.Sampler(interval, capacity=1 << 16, **kw, **UNBUDGETED)
    try:
        c0 = process_cpu_ns()
        s.start()
        time.sleep(seconds)
        s.stop()
        c1 = process_cpu_ns()
        st = s.stats()
    finally:
        s.close()
    ticks = max(1, st.ticks_taken)
    per_read = {x.name: x.read_ns_total / max(1, x.reads) for x in st.sources}
    per_tick = {x.name: x.read_ns_total / ticks for x in st.sources}
    every = {x.name: x.every for x in st.sources}
    return {
        "all_in_ns": (c1 - c0) / ticks,
        "thread_ns": st.thread_cpu_ns / ticks,
        "taken": st.ticks_taken,
        "missed": st.ticks_missed,
        "per_read_ns": per_read,
        "per_tick_ns": per_tick,
        "every": every,
    }


def _psutil(seconds: float) -> dict[str, Any]:
    """A psutil thread asked for 1 kHz: process CPU per sample taken, the main thread asleep."""
    all_in_ns, taken = psutil_thread_cost(seconds)
    return {"all_in_ns": all_in_ns, "taken": taken}


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run_1khz(floor: FloorLib, rounds: int, seconds: float) -> dict[str, Any]:
    """Default set at 1 kHz: wake, naive, psutil, stroboscope, interleaved rounds."""
    rows: dict[str, list[dict[str, Any]]] = {"wake": [], "naive": [], "psutil": [], "strobo": []}
    load: list[float] = []
    for r in range(rounds):
        log(f"1 kHz round {r + 1}/{rounds}")
        other = OtherLoad()
        rows["wake"].append(floor.run("none", 1_000_000, seconds))
        rows["naive"].append(floor.run("seed", 1_000_000, seconds))
        rows["strobo"].append(_strobo(0.001, seconds))
        rows["psutil"].append(_psutil(seconds))
        load.append(other.cores())
    ratios = []
    for w, n, s in zip(rows["wake"], rows["naive"], rows["strobo"]):
        above_naive = n["all_in_ns"] - w["all_in_ns"]
        ratios.append((s["all_in_ns"] - w["all_in_ns"]) / above_naive if above_naive > 0 else 0)
    return {"rows": rows, "above_ratio": ratios, "other_cores": load}


def run_10khz(floor: FloorLib, rounds: int, seconds: float) -> dict[str, Any]:
    """The process source alone at 10 kHz beside the wake and the naive process reads."""
    rows: dict[str, list[dict[str, Any]]] = {"wake": [], "naive": [], "strobo": []}
    load: list[float] = []
    for r in range(rounds):
        log(f"10 kHz round {r + 1}/{rounds}")
        other = OtherLoad()
        rows["wake"].append(floor.run("none", 100_000, seconds))
        rows["naive"].append(floor.run("process", 100_000, seconds))
        rows["strobo"].append(_strobo(0.0001, seconds, ["process"]))
        load.append(other.cores())
    return {"rows": rows, "other_cores": load}


def _taken_pct(d: dict[str, Any]) -> float:
    total = d["taken"] + d["missed"]
    return 100.0 * d["taken"] / total if total else 0.0


def run_busy(floor: FloorLib, rounds: int, work_s: float) -> dict[str, Any]:
    """1 kHz beside a busy Python main thread: none, stroboscope, naive C thread, rotated."""
    n = calibrate(work_s)
    res: dict[str, list[dict[str, Any]]] = {"none": [], "strobo": [], "naive": []}

    def timed() -> float:
        t0 = time.perf_counter()
        busy_loop(n)
        return time.perf_counter() - t0

    for r in range(rounds):
        log(f"busy round {r + 1}/{rounds}")
        other = OtherLoad()
        res["none"].append({"seconds": timed(), "other": other.cores()})
        other = OtherLoad()
        s = stroboscope.Sampler(0.001, capacity=1 << 16, **UNBUDGETED)
        s.start()
        sec = timed()
        s.stop()
        st = s.stats()
        s.close()
        res["strobo"].append(
            {"seconds": sec, "taken": st.ticks_taken, "missed": st.ticks_missed}
            | {"other": other.cores()}
        )
        other = OtherLoad()
        t, out = floor.start("seed", 1_000_000, 3600.0)
        sec = timed()
        floor.lib.floor_thread_stop()
        t.join()
        res["naive"].append(out | {"seconds": sec, "other": other.cores()})
    return {"rows": res, "n": n}


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def report(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> str:
    """The results of the parts that ran, as markdown."""
    out: list[str] = [f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; stroboscope {_version()}"]
    if a["rows"]:
        out += _report_1khz(a)
    if b["rows"]:
        out += _report_10khz(b)
    if c["rows"]:
        out += _report_busy(c)
    return "\n".join(out)


def _report_1khz(a: dict[str, Any]) -> list[str]:
    out: list[str] = []
    r = a["rows"]
    w, n, p, s = (
        med([x["all_in_ns"] for x in r[k]]) for k in ("wake", "naive", "psutil", "strobo")
    )
    ratio = med(a["above_ratio"])
    out += [
        "",
        "**Default set at 1 kHz, main thread asleep: process CPU per tick (median of "
        f"{len(r['wake'])} interleaved rounds; other processes {_cores(a['other_cores'])})**",
        "",
        "| row | all-in per tick | above the bare wake | ticks taken |",
        "| --- | --- | --- | --- |",
        f"| bare wake (C thread, reads nothing) | {_us(w)} | — | {_pct(r['wake'])} |",
        f"| naive C sampler (6 preads + statvfs) | {_us(n)} | {_us(n - w)} | {_pct(r['naive'])} |",
        f"| psutil thread | {_us(p)} | {_us(p - w)} | — |",
        f"| stroboscope default set | {_us(s)} | {_us(s - w)} | {_pct(r['strobo'])} |",
        "",
        f"stroboscope's work above the wake / the naive sampler's: **{ratio:.2f}x** (per round: "
        + ", ".join(f"{x:.2f}" for x in a["above_ratio"])
        + f"; target ≤ {TARGET_ABOVE_WAKE}x); all-in / bare wake: "
        f"**{med([x['all_in_ns'] / y['all_in_ns'] for x, y in zip(r['strobo'], r['wake'])]):.2f}x**"
        f" (target ≤ {TARGET_ALL_IN_WAKE}x). Sampler thread CPU per tick "
        f"{_us(med([x['thread_ns'] for x in r['strobo']]))}.",
        "",
        "stroboscope per source (median of rounds): ns per read, every (ticks), ns per tick:",
        "",
    ]
    names = list(r["strobo"][0]["per_read_ns"])
    for name in names:
        pr = med([x["per_read_ns"][name] for x in r["strobo"]])
        pt = med([x["per_tick_ns"][name] for x in r["strobo"]])
        every = r["strobo"][0]["every"][name]
        out.append(f"- {name}: {_us(pr)} per read, every {every}, {_us(pt)} per tick")
    return out


def _report_10khz(b: dict[str, Any]) -> list[str]:
    r = b["rows"]
    w, n, s = (med([x["all_in_ns"] for x in r[k]]) for k in ("wake", "naive", "strobo"))
    return [
        "",
        f"**10 kHz, process source only** (other processes {_cores(b['other_cores'])})",
        "",
        "| row | all-in per tick | above the wake | ticks taken |",
        "| --- | --- | --- | --- |",
        f"| bare wake | {_us(w)} | — | {_pct(r['wake'])} |",
        f"| naive C (pread stat + statm) | {_us(n)} | {_us(n - w)} | {_pct(r['naive'])} |",
        f"| stroboscope `sources=['process']` | {_us(s)} | {_us(s - w)} | {_pct(r['strobo'])} |",
    ]


def _report_busy(c: dict[str, Any]) -> list[str]:
    r = c["rows"]
    base = med([x["seconds"] for x in r["none"]])
    return [
        "",
        f"**1 kHz beside a busy Python main thread** (busy_loop({c['n']:,}), ~{base:.2f} s; "
        f"other processes {_cores([x['other'] for x in r['strobo']])})",
        "",
        "| row | ticks taken | workload slowdown |",
        "| --- | --- | --- |",
        f"| naive C sampler thread (same process, same GIL) | {_pct(r['naive'])} | "
        f"{100 * (med([x['seconds'] for x in r['naive']]) / base - 1):+.2f} % |",
        f"| stroboscope default set | {_pct(r['strobo'])} | "
        f"{100 * (med([x['seconds'] for x in r['strobo']]) / base - 1):+.2f} % |",
    ]


def _pct(rows: list[dict[str, Any]]) -> str:
    return f"{med([_taken_pct(x) for x in rows]):.2f} %"


def _cores(values: list[float]) -> str:
    return f"{med(values):.2f} cores (median; max {max(values):.2f})"


def _version() -> str:
    return getattr(stroboscope, "__version__", "?")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--only", default="1,2,3", help="which parts: 1 (1 kHz), 2 (10 kHz), 3 (busy)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    parts = set(args.only.split(","))
    floor = FloorLib()
    empty: dict[str, Any] = {"rows": {}}
    try:
        a = run_1khz(floor, args.rounds, args.seconds) if "1" in parts else empty
        b = run_10khz(floor, args.rounds, args.seconds) if "2" in parts else empty
        c = run_busy(floor, args.rounds, args.seconds) if "3" in parts else empty
    finally:
        floor.close()
    if args.json:
        args.json.write_text(json.dumps({"1khz": a, "10khz": b, "busy": c}, indent=1))
    print(report(a, b, c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
