"""Benchmarks 2 and 3: sampling at 1 kHz beside a busy Python thread, and at 10 kHz.

2. The main thread runs a fixed amount of pure-Python work (a CPU-bound loop sized once to take
   a few seconds) with no monitor, with stroboscope at 1 kHz (default sources), with a psutil
   thread asked for 1,000 samples/s of the seed values, and with the floor (``floor.c`` in timer
   mode, a separate process reading the same files at 1 kHz). The modes alternate, the order
   rotating each repeat, and slowdowns are medians of ratios taken within one repeat.
3. stroboscope at 10 kHz with the process source alone for a few seconds, the main thread
   asleep; beside it, a psutil thread asked for 10,000 samples/s of the same process values and
   the floor's timer mode reading the same four files at 10 kHz.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, Callable

import stroboscope
from bench_common import (
    QUIET_CORES,
    UNBUDGETED,
    BenchResult,
    Floor,
    OtherLoad,
    Row,
    cpu_jiffies,
    fmt_ns,
    log,
    median,
    spread_pct,
    steal_pct,
    verdict,
)
from psutil_baseline import ProcessSampler, SeedSampler, ThreadSampler

TARGET_TAKEN_1K = 99.5  # % of scheduled ticks
TARGET_P99_LATE_NS = 200_000
TARGET_SLOWDOWN_PCT = 2.0
TARGET_TAKEN_10K = 99.0


def busy_loop(n: int) -> int:
    """Pure-Python CPU-bound work: ``n`` iterations of integer arithmetic."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def calibrate(seconds: float) -> int:
    """Iterations of :func:`busy_loop` taking about ``seconds`` here, with no monitor."""
    n = 100_000
    while True:
        t0 = time.perf_counter()
        busy_loop(n)
        dt = time.perf_counter() - t0
        if dt > 0.25:
            return int(n * seconds / dt)
        n *= 2


def _timed(n: int) -> float:
    gc.collect()
    t0 = time.perf_counter()
    busy_loop(n)
    return time.perf_counter() - t0


def _strobo_stats(st: stroboscope.SamplerStats, life_s: float) -> dict[str, Any]:
    """The numbers of one stroboscope run, from its stats()."""
    return {
        "taken_pct": 100.0 * st.ticks_taken / max(1, st.ticks_scheduled),
        "taken": st.ticks_taken,
        "scheduled": st.ticks_scheduled,
        "rows_per_s": st.rows_written / life_s,
        "late_p50_ns": st.lateness_p50_ns,
        "late_p99_ns": st.lateness_p99_ns,
        "late_max_ns": st.lateness_max_ns,
        "cost_mean_ns": st.cost_mean_ns,
        "cost_p99_ns": st.cost_p99_ns,
        "cpu_pct": 100.0 * st.thread_cpu_ns / (life_s * 1e9),
        "sources": [src.name for src in st.sources],
    }


def _floor_stats(f: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one floor timer run, named like :func:`_strobo_stats`."""
    scheduled = f["ticks_taken"] + f["ticks_missed"]
    return {
        "taken_pct": 100.0 * f["ticks_taken"] / max(1, scheduled),
        "taken": f["ticks_taken"],
        "scheduled": scheduled,
        "rows_per_s": f["ticks_taken"] / f["seconds"],
        "late_p50_ns": f["lateness_p50_ns"],
        "late_p99_ns": f["lateness_p99_ns"],
        "late_max_ns": f["lateness_max_ns"],
        "cost_mean_ns": f["cost_mean_ns"],
    }


class _BusyModes:
    """The four ways benchmark 2 runs the workload: none, stroboscope, psutil, floor."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor

    def none(self, n: int) -> dict[str, Any]:
        """The workload alone."""
        return {"seconds": _timed(n)}

    def strobo(self, n: int) -> dict[str, Any]:
        """The workload beside stroboscope at 1 kHz with the default sources."""
        s = stroboscope.Sampler(0.001, **UNBUDGETED)
        j0 = cpu_jiffies()
        s.start()
        t0 = time.perf_counter()
        seconds = _timed(n)
        s.stop()
        life = time.perf_counter() - t0
        out = _strobo_stats(s.stats(), life)
        s.close()
        out.update(seconds=seconds, steal_pct=steal_pct(j0, cpu_jiffies()))
        return out

    def psutil(self, n: int) -> dict[str, Any]:
        """The workload beside a psutil thread asked for 1,000 samples/s."""
        t = ThreadSampler(SeedSampler().sample, 0.001)
        t.start()
        seconds = _timed(n)
        t.stop()
        return {"seconds": seconds, "per_s": t.achieved_per_s}

    def floor_timer(self, n: int) -> dict[str, Any]:
        """The workload beside the floor reading the same files at 1 kHz in another process."""
        proc = self.floor.start_timer(1_000_000, "seed", pid=os.getpid())
        time.sleep(0.01)  # let it start before the clock runs
        seconds = _timed(n)
        out = _floor_stats(Floor.stop_timer(proc))
        out["seconds"] = seconds
        return out


def _quiet(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs during which other processes used less than QUIET_CORES cores."""
    return [x for x in runs if x["others"] < QUIET_CORES]


def _quiet_busy(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Benchmark 2's target numbers over the quiet runs only (an explanation, not a verdict)."""
    head = f"quiet runs only (other processes < {QUIET_CORES} cores): "
    q = _quiet(runs["strobo"])
    if not q:
        return head + "none of the stroboscope runs was quiet"
    out = (
        f"{head}stroboscope {len(q)}/{len(runs['strobo'])} runs, taken "
        f"{median([x['taken_pct'] for x in q]):.2f} %, p99 lateness "
        f"{fmt_ns(median([x['late_p99_ns'] for x in q]))}"
    )
    qf = _quiet(runs.get("floor", []))
    if qf:
        out += (
            f"; floor {len(qf)} runs, taken {median([x['taken_pct'] for x in qf]):.2f} %, "
            f"p99 {fmt_ns(median([x['late_p99_ns'] for x in qf]))}"
        )
    pairs = [
        100.0 * (s["seconds"] / b["seconds"] - 1)
        for s, b in zip(runs["strobo"], runs["none"])
        if max(s["others"], b["others"]) < QUIET_CORES
    ]
    if pairs:
        out += f"; slowdown over {len(pairs)} quiet repeat(s) {median(pairs):+.2f} %"
    return out


def _quiet_10khz(runs: list[dict[str, Any]], floor_runs: list[dict[str, Any]]) -> str:
    """Benchmark 3's taken % over the quiet runs only (an explanation, not a verdict)."""
    head = f"quiet runs only (other processes < {QUIET_CORES} cores): "
    q, qf = _quiet(runs), _quiet(floor_runs)
    if not q:
        return head + "none of the stroboscope runs was quiet"
    out = (
        f"{head}stroboscope {len(q)}/{len(runs)} runs, taken "
        f"{median([x['taken_pct'] for x in q]):.2f} %"
    )
    if qf:
        out += f"; floor {len(qf)} runs, taken {median([x['taken_pct'] for x in qf]):.2f} %"
    return out


def run_busy(floor: Floor, repeats: int, work_seconds: float) -> BenchResult:
    """Benchmark 2: 1 kHz beside a CPU-bound Python main thread."""
    res = BenchResult("2. 1 kHz beside a busy Python thread")
    n = calibrate(work_seconds)
    m = _BusyModes(floor)
    modes: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
        ("none", m.none),
        ("strobo", m.strobo),
        ("psutil", m.psutil),
    ]
    if floor.exe is not None:
        modes.append(("floor", m.floor_timer))
    m.none(n // 10)  # warm-up
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in modes}
    for r in range(repeats):
        k = r % len(modes)
        order = modes[k:] + modes[:k]
        log(f"bench 2: repeat {r + 1}/{repeats} ({', '.join(name for name, _ in order)})")
        for name, fn in order:
            load = OtherLoad()
            out = fn(n)
            out["others"] = load.cores()
            res.other_cores.append(out["others"])
            runs[name].append(out)

    def slowdown(mode: str) -> float:
        return median(
            [100.0 * (x["seconds"] / b["seconds"] - 1) for x, b in zip(runs[mode], runs["none"])]
        )

    def med(mode: str, key: str) -> float:
        return median([x[key] for x in runs[mode]])

    has_floor = "floor" in runs
    slow_strobo = slowdown("strobo")
    taken = med("strobo", "taken_pct")
    p99 = med("strobo", "late_p99_ns")
    strobo_rate = med("strobo", "rows_per_s")
    psutil_rate = med("psutil", "per_s")
    res.raw = {"iterations": n, "runs": runs}
    b = "2 1 kHz + busy Python"

    def fl(f: Callable[[], str]) -> str:
        return f() if has_floor else "—"

    res.rows += [
        Row(
            b,
            "samples/s achieved (asked 1,000)",
            f"{strobo_rate:.0f}",
            f"{psutil_rate:.0f}",
            fl(lambda: f"{med('floor', 'rows_per_s'):.0f}"),
            ratio=f"strobo/psutil {strobo_rate / max(psutil_rate, 1e-9):.1f}x",
        ),
        Row(
            b,
            "ticks taken / scheduled",
            f"{taken:.2f} %",
            floor=fl(lambda: f"{med('floor', 'taken_pct'):.2f} %"),
            target=f"≥ {TARGET_TAKEN_1K} %",
            verdict=verdict(taken >= TARGET_TAKEN_1K),
        ),
        Row(
            b,
            "lateness p99 (stats())",
            fmt_ns(p99),
            floor=fl(lambda: fmt_ns(med("floor", "late_p99_ns"))),
            target=f"≤ {fmt_ns(TARGET_P99_LATE_NS)}",
            verdict=verdict(p99 <= TARGET_P99_LATE_NS),
        ),
        Row(
            b,
            "workload slowdown vs no monitor",
            f"{slow_strobo:+.2f} %",
            f"{slowdown('psutil'):+.2f} %",
            fl(lambda: f"{slowdown('floor'):+.2f} %"),
            target=f"≤ {TARGET_SLOWDOWN_PCT:.0f} %",
            verdict=verdict(slow_strobo <= TARGET_SLOWDOWN_PCT),
        ),
    ]
    secs = {mode: [x["seconds"] for x in runs[mode]] for mode in runs}
    res.details += [
        f"workload: busy_loop({n:,}); medians over {repeats} rotated repeats: "
        + ", ".join(f"{mode} {median(v):.3f} s" for mode, v in secs.items())
        + f"; no-monitor spread (max-min)/median {spread_pct(secs['none']):.1f} %",
        "other processes' CPU per run (cores): "
        + "; ".join(
            f"{mode} " + ", ".join(f"{x['others']:.2f}" for x in runs[mode]) for mode in runs
        ),
        "slowdowns are medians of per-repeat ratios (each repeat runs the modes back to back)",
        f"stroboscope sources: {', '.join(runs['strobo'][0]['sources'])}; lateness p50 "
        f"{fmt_ns(med('strobo', 'late_p50_ns'))}, max (worst run) "
        f"{fmt_ns(max(x['late_max_ns'] for x in runs['strobo']))}; cost per tick mean "
        f"{fmt_ns(med('strobo', 'cost_mean_ns'))}, p99 {fmt_ns(med('strobo', 'cost_p99_ns'))}; "
        f"sampler thread CPU {med('strobo', 'cpu_pct'):.1f} % of one core; hypervisor steal "
        f"{med('strobo', 'steal_pct'):.1f} %",
        "stroboscope ticks taken/scheduled per run: "
        + ", ".join(f"{x['taken']}/{x['scheduled']}" for x in runs["strobo"]),
        "p99 lateness per run (µs): stroboscope "
        + ", ".join(f"{x['late_p99_ns'] / 1e3:.0f}" for x in runs["strobo"])
        + (
            ("; floor " + ", ".join(f"{x['late_p99_ns'] / 1e3:.0f}" for x in runs["floor"]))
            if has_floor
            else ""
        ),
        _quiet_busy(runs),
        "psutil: a Python thread on 1 ms deadlines that catches up instead of skipping; "
        "floor: floor.c timer mode in its own process, preading the 7 files + statvfs of the seed "
        "set at 1 kHz (no diskio), lateness p50 "
        + fl(lambda: fmt_ns(med("floor", "late_p50_ns")))
        + ", cost per tick mean "
        + fl(lambda: fmt_ns(med("floor", "cost_mean_ns"))),
    ]
    return res


def run_10khz(floor: Floor, repeats: int, seconds: float) -> BenchResult:
    """Benchmark 3: 10 kHz with the process source alone, main thread asleep."""
    res = BenchResult("3. 10 kHz, process source")
    runs: list[dict[str, Any]] = []
    floor_runs: list[dict[str, Any]] = []
    psutil_rates: list[float] = []
    for r in range(repeats):
        log(f"bench 3: repeat {r + 1}/{repeats}")
        s = stroboscope.Sampler(0.0001, sources=["process"], capacity=1 << 16, **UNBUDGETED)
        load = OtherLoad()
        j0 = cpu_jiffies()
        t0 = time.perf_counter()
        s.start()
        time.sleep(seconds)
        s.stop()
        life = time.perf_counter() - t0
        out = _strobo_stats(s.stats(), life)
        out["steal_pct"] = steal_pct(j0, cpu_jiffies())
        out["others"] = load.cores()
        res.other_cores.append(out["others"])
        runs.append(out)
        s.close()
        if floor.exe is not None:
            load = OtherLoad()
            floor_runs.append(_floor_stats(floor.timer(100_000, seconds, "process")))
            floor_runs[-1]["others"] = load.cores()
            res.other_cores.append(floor_runs[-1]["others"])
        t = ThreadSampler(ProcessSampler().sample, 0.0001)
        t.start()
        time.sleep(seconds)
        t.stop()
        psutil_rates.append(t.achieved_per_s)

    def med(key: str, which: list[dict[str, Any]] | None = None) -> float:
        return median([x[key] for x in (runs if which is None else which)])

    def fl(f: Callable[[], str]) -> str:
        return f() if floor_runs else "—"

    taken = med("taken_pct")
    cost = med("cost_mean_ns")
    b = "3 10 kHz process"
    res.raw = {"runs": runs, "floor_runs": floor_runs, "psutil_per_s": psutil_rates}
    res.rows += [
        Row(
            b,
            "samples/s achieved (asked 10,000)",
            f"{med('rows_per_s'):.0f}",
            f"{median(psutil_rates):.0f}",
            fl(lambda: f"{med('rows_per_s', floor_runs):.0f}"),
        ),
        Row(
            b,
            "ticks taken / scheduled",
            f"{taken:.2f} %",
            floor=fl(lambda: f"{med('taken_pct', floor_runs):.2f} %"),
            target=f"≥ {TARGET_TAKEN_10K} %",
            verdict=verdict(taken >= TARGET_TAKEN_10K),
        ),
        Row(
            b,
            "lateness p50 / p99",
            f"{fmt_ns(med('late_p50_ns'))} / {fmt_ns(med('late_p99_ns'))}",
            floor=fl(
                lambda: (
                    f"{fmt_ns(med('late_p50_ns', floor_runs))} / "
                    f"{fmt_ns(med('late_p99_ns', floor_runs))}"
                )
            ),
        ),
        Row(
            b,
            "cost per tick (mean)",
            fmt_ns(cost),
            floor=fl(lambda: fmt_ns(med("cost_mean_ns", floor_runs))),
            ratio=fl(lambda: f"strobo/floor {cost / med('cost_mean_ns', floor_runs):.2f}x"),
        ),
        Row(b, "sampler thread CPU", f"{med('cpu_pct'):.1f} % of a core"),
    ]
    res.details += [
        f"{repeats} run(s) of {seconds:g} s each, main thread asleep; medians; hypervisor steal "
        f"{med('steal_pct'):.1f} %",
        f"stroboscope cost p99 {fmt_ns(med('cost_p99_ns'))}; lateness max (worst run) "
        f"{fmt_ns(max(x['late_max_ns'] for x in runs))}"
        + fl(lambda: f"; floor lateness max {fmt_ns(max(x['late_max_ns'] for x in floor_runs))}"),
        "other processes' CPU per run (cores): stroboscope "
        + ", ".join(f"{x['others']:.2f}" for x in runs)
        + fl(lambda: "; floor " + ", ".join(f"{x['others']:.2f}" for x in floor_runs)),
        _quiet_10khz(runs, floor_runs),
        "ticks taken/scheduled per run: stroboscope "
        + ", ".join(f"{x['taken']}/{x['scheduled']}" for x in runs)
        + fl(lambda: "; floor " + ", ".join(f"{x['taken']}/{x['scheduled']}" for x in floor_runs)),
        "floor: floor.c timer mode, same deadlines and skip rule, preading /proc/PID/stat and "
        "statm each tick; stroboscope's cost also includes its clock reads, row assembly and "
        "ring push",
        "psutil: a Python thread asked for 10,000/s of cpu_times, memory_info, memory_percent, "
        "num_threads; it catches up instead of skipping, so its samples/s is not on a regular "
        "grid",
    ]
    return res
