"""Benchmark 1: the cost of one sample of the seed metric set.

Three ways of reading the same values, interleaved round by round so that drift on a shared
machine hits all of them alike, and compared by ratios taken within each round:

- stroboscope: ``run_ticks_inline(n)`` runs n back-to-back ticks on the calling thread (no
  sleeping, GIL released) with the seed sources (cpu, memory, network, disk, process);
- psutil: a Python function making the psutil calls a monitor makes for the same values;
- the floor: ``floor.c`` preads the same /proc files through kept-open fds with a minimal parse.
"""

from __future__ import annotations

import inspect
import resource
import time
import timeit
from collections.abc import Sequence
from typing import Any

import stroboscope
from bench_common import (
    UNBUDGETED,
    BenchResult,
    Floor,
    OtherLoad,
    Row,
    fmt_ns,
    log,
    median,
    process_cpu_ns,
    spread_pct,
    verdict,
)
from psutil_baseline import SeedSampler, psutil_thread_cost

SEED_SOURCES = ["cpu", "memory", "network", "disk", "process"]
# floor.c item for each stroboscope source, to set the per-source split beside the floor.
FLOOR_ITEMS = {
    "cpu": ["/proc/stat"],
    "memory": ["/proc/meminfo"],
    "network": ["/proc/net/dev"],
    "disk": ["statvfs(/)"],
    # The seed set's process columns (CPU %, RSS, memory %, threads) come from stat and statm;
    # I/O bytes and context switches (status, io) are the opt-in process_io source.
    "process": ["/proc/PID/stat", "/proc/PID/statm"],
}
TARGET_FLOOR_RATIO = 1.3
TARGET_PSUTIL_SPEEDUP = 10.0


def _time_strobo(sampler: stroboscope.Sampler, ticks: int, repeat: int = 3) -> list[float]:
    """ns per tick of each of ``repeat`` batches of ``ticks`` back-to-back inline ticks."""
    return [sampler._core.run_ticks_inline(ticks) / ticks for _ in range(repeat)]


def _time_call(fn: Any, seconds: float) -> float:
    """ns per call of ``fn``: median of 3 timeit repeats together taking about ``seconds``."""
    timer = timeit.Timer(fn)
    number, elapsed = timer.autorange()
    number = max(1, int(number * seconds / 3 / max(elapsed, 1e-9)))
    return median(timer.repeat(repeat=3, number=number)) / number * 1e9


def _make_sampler(cpu_window: float | None) -> stroboscope.Sampler:
    """A stopped sampler of the seed sources; ``cpu_window=None`` keeps the package default."""
    kwargs: dict[str, Any] = {} if cpu_window is None else {"cpu_window": cpu_window}
    return stroboscope.Sampler(
        0.001, sources=SEED_SOURCES, capacity=1 << 16, **kwargs, **UNBUDGETED
    )


def _split(
    before: Sequence[stroboscope.SourceStats], after: Sequence[stroboscope.SourceStats]
) -> dict[str, float]:
    """ns per read of each source between two ``stats().sources`` lists."""
    out: dict[str, float] = {}
    for b, a in zip(before, after):
        reads = a.reads - b.reads
        out[a.name] = (a.read_ns_total - b.read_ns_total) / reads if reads else 0.0
    return out


def run(floor: Floor, rounds: int, seconds_per_round: float) -> BenchResult:
    """Run ``rounds`` rounds of (floor, stroboscope, psutil) and report medians and ratios.

    stroboscope is measured twice: with ``cpu_window=0``, so that /proc/stat is read and CPU %
    computed on every tick like the floor and psutil do (the like-for-like number the targets
    apply to), and as shipped, where CPU % is computed over windows of at least
    ``cpu_window`` (default 0.1 s) and /proc/stat is read only that often.
    """
    res = BenchResult("1. cost of one sample")
    try:
        sampler = _make_sampler(0.0)
        shipped: stroboscope.Sampler | None = _make_sampler(None)
    except TypeError:  # a build without cpu_window reads /proc/stat on every tick anyway
        sampler, shipped = _make_sampler(None), None
        res.details.append("this build has no cpu_window: /proc/stat is read on every tick")
    baseline = SeedSampler()
    sample = baseline.sample

    # Warm up all three, and size stroboscope's batches to take about seconds_per_round.
    _time_strobo(sampler, 2000)
    sample()
    probe = median(_time_strobo(sampler, 2000))
    ticks = max(1000, int(seconds_per_round / 3 * 1e9 / probe))  # 3 batches per round
    if shipped is not None:
        _time_strobo(shipped, 2000, repeat=1)
    strobo_ns: list[float] = []
    shipped_ns: list[float] = []
    psutil_ns: list[float] = []
    floor_seed: list[float] = []
    floor_full: list[float] = []
    floor_runs: list[dict[str, float]] = []
    splits: list[dict[str, float]] = []  # per round: ns per read of each source
    overheads: list[float] = []  # per round: mean tick minus the sum of its sources
    splits_shipped: list[dict[str, float]] = []
    for r in range(rounds):
        log(f"bench 1: round {r + 1}/{rounds}")
        load = OtherLoad()
        if floor.exe is not None:
            f = floor.measure(batches=5, batch_ms=seconds_per_round * 1000 / 55)
            floor_runs.append(f)
            floor_seed.append(f["seed"])
            floor_full.append(f["full"])
        before = sampler.stats().sources
        batches = _time_strobo(sampler, ticks)
        splits.append(_split(before, sampler.stats().sources))
        strobo_ns.append(median(batches))
        overheads.append(sum(batches) / len(batches) - sum(splits[-1].values()))
        if shipped is not None:
            before = shipped.stats().sources
            shipped_ns.append(median(_time_strobo(shipped, ticks)))
            splits_shipped.append(_split(before, shipped.stats().sources))
        psutil_ns.append(_time_call(sample, seconds_per_round))
        res.other_cores.append(load.cores())

    split = {k: median([sp[k] for sp in splits]) for k in splits[0]}
    split_shipped = (
        {k: median([sp[k] for sp in splits_shipped]) for k in splits_shipped[0]}
        if splits_shipped
        else {}
    )

    s_med = median(strobo_ns)
    p_med = median(psutil_ns)
    speedups = [p / s for p, s in zip(psutil_ns, strobo_ns)]
    res.raw = {
        "strobo_ns": strobo_ns,
        "strobo_shipped_ns": shipped_ns,
        "psutil_ns": psutil_ns,
        "floor_seed_ns": floor_seed,
        "floor_full_ns": floor_full,
        "strobo_split_ns": split,
        "strobo_shipped_split_ns": split_shipped,
        "ticks_per_round": ticks,
    }
    b = "1 sample cost"
    m = "ns per sample"
    res.rows.append(
        Row(
            b,
            f"{m} vs psutil",
            fmt_ns(s_med),
            fmt_ns(p_med),
            ratio=f"psutil/strobo {median(speedups):.1f}x",
            target=f"≥ {TARGET_PSUTIL_SPEEDUP:.0f}x faster",
            verdict=verdict(median(speedups) >= TARGET_PSUTIL_SPEEDUP),
        )
    )
    if floor_seed:
        r_seed = median([s / f for s, f in zip(strobo_ns, floor_seed)])
        r_full = median([s / f for s, f in zip(strobo_ns, floor_full)])
        res.raw.update(ratio_seed=r_seed, ratio_full=r_full)
        res.rows.append(
            Row(
                b,
                f"{m} vs floor (5 files + statvfs)",
                fmt_ns(s_med),
                floor=fmt_ns(median(floor_seed)),
                ratio=f"strobo/floor {r_seed:.2f}x",
                target=f"≤ {TARGET_FLOOR_RATIO}x floor",
                verdict=verdict(r_seed <= TARGET_FLOOR_RATIO),
            )
        )
        res.rows.append(
            Row(
                b,
                f"{m} vs floor + status + io (info: two files more than the seed set reads)",
                fmt_ns(s_med),
                floor=fmt_ns(median(floor_full)),
                ratio=f"strobo/floor {r_full:.2f}x",
                target="—",
                verdict="info",
            )
        )
        res.details.append(
            "psutil/floor(5 files + statvfs) = "
            f"{median([p / f for p, f in zip(psutil_ns, floor_seed)]):.1f}x"
        )
    else:
        res.details.append(f"floor unavailable: {floor.error}")
    if shipped_ns:
        sh = median(shipped_ns)
        # (the facade holds the default; the recording Sampler passes its options through)
        window = (
            inspect.signature(stroboscope.sampling.CoreSampler).parameters["cpu_window"].default
        )
        res.rows.append(
            Row(
                b,
                f"{m}, as shipped (cpu_window {window:g} s: /proc/stat read that often)",
                fmt_ns(sh),
                fmt_ns(p_med),
                fmt_ns(median(floor_seed)) if floor_seed else "—",
                ratio=f"psutil/strobo {median([p / s for p, s in zip(psutil_ns, shipped_ns)]):.1f}x"
                + (
                    f", strobo/floor {median([s / f for s, f in zip(shipped_ns, floor_seed)]):.2f}x"
                    if floor_seed
                    else ""
                ),
            )
        )

    res.details.append(
        f"the target rows use cpu_window=0 (CPU % from /proc/stat on every tick, as the floor and "
        f"psutil do); medians over {rounds} interleaved rounds; spread (max-min)/median: "
        f"stroboscope {spread_pct(strobo_ns):.0f}%, psutil {spread_pct(psutil_ns):.0f}%"
        + (f", floor {spread_pct(floor_seed):.0f}%" if floor_seed else "")
    )
    res.details.append(
        "stroboscope per-source split (read_ns_total / reads, median of rounds) vs floor per file:"
    )
    item_medians = (
        {k: median([f[k] for f in floor_runs]) for k in floor_runs[0]} if floor_runs else {}
    )
    for name, ns in split.items():
        items = FLOOR_ITEMS.get(name, [])
        fl = sum(item_medians.get(i, 0.0) for i in items)
        extra = f"  floor {fmt_ns(fl)} ({' + '.join(items)}) → {ns / fl:.2f}x" if fl else ""
        res.details.append(f"  {name:<8} {fmt_ns(ns):>10}{extra}")
    overhead = median(overheads)
    res.details.append(
        f"  tick overhead outside sources (row, ring push, clocks): {fmt_ns(overhead)}"
    )
    if split_shipped:
        res.details.append(
            "as shipped, per source: "
            + ", ".join(f"{k} {fmt_ns(v)}" for k, v in split_shipped.items())
        )
    if item_medians:
        res.details.append(
            "floor per file alone: "
            + ", ".join(
                f"{k} {fmt_ns(v)}"
                for k, v in item_medians.items()
                if k not in ("seed", "full", "process")
            )
        )

    # psutil's per-call split, for the notes (one pass, after the rounds).
    parts = {name: _time_call(fn, 0.1) for name, fn in baseline.split().items()}
    res.raw["psutil_split_ns"] = parts
    res.details.append(
        "psutil per call: " + ", ".join(f"{k} {fmt_ns(v)}" for k, v in parts.items())
    )
    sampler.close()
    if shipped is not None:
        shipped.close()
    _all_in(res, floor, rounds, seconds_per_round)
    return res


TARGET_ALL_IN_NS = 15_000.0
TARGET_ALL_IN_PSUTIL = 25.0


def _strobo_all_in(seconds: float) -> float:
    """ns of process CPU per row of the default set at 1 kHz, the main thread asleep."""
    s = stroboscope.Sampler(0.001, capacity=1 << 16, **UNBUDGETED)
    try:
        c0 = process_cpu_ns()
        s.start()
        time.sleep(seconds)
        s.stop()
        c1 = process_cpu_ns()
        rows = s.stats().rows_written
    finally:
        s.close()
    return (c1 - c0) / max(1, rows)


def _psutil_all_in(seconds: float) -> float:
    """ns of process CPU per sample of a psutil thread asked for 1 kHz, the main thread asleep."""
    return psutil_thread_cost(seconds)[0]


def _floor_all_in(floor: Floor, seconds: float, variant: str = "seed") -> float:
    """ns of CPU per tick of floor.c's timer mode at 1 kHz: ``seed`` preads the seed files every
    tick; ``none`` reads nothing (the cost of one timed sleep and wake on this machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = floor.timer(1_000_000, seconds, variant)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu * 1e9 / max(1, int(result["ticks_taken"]))


def _all_in(res: BenchResult, floor: Floor, rounds: int, seconds_per_round: float) -> None:
    """All-in CPU per tick at 1 kHz, measured from outside (process CPU time / rows), beside a
    psutil thread and the naive pread-every-file floor, in interleaved rounds."""
    seconds = max(1.0, seconds_per_round)
    strobo: list[float] = []
    psu: list[float] = []
    flo: list[float] = []
    wake: list[float] = []
    for r in range(rounds):
        log(f"bench 1 (all-in at 1 kHz): round {r + 1}/{rounds}")
        strobo.append(_strobo_all_in(seconds))
        psu.append(_psutil_all_in(seconds))
        if floor.exe is not None:
            flo.append(_floor_all_in(floor, seconds))
            wake.append(_floor_all_in(floor, seconds, "none"))
    res.raw.update(
        all_in_strobo_ns=strobo, all_in_psutil_ns=psu, all_in_floor_ns=flo, all_in_wake_ns=wake
    )
    speedup = median([p / s for p, s in zip(psu, strobo)])
    b = "1 sample cost"
    res.rows.append(
        Row(
            b,
            "all-in CPU per tick at 1 kHz, default set (process CPU / rows, main asleep)",
            fmt_ns(median(strobo)),
            fmt_ns(median(psu)),
            fmt_ns(median(flo)) if flo else "—",
            ratio=f"psutil/strobo {speedup:.1f}x"
            + (
                f", strobo/floor {median([s / f for s, f in zip(strobo, flo)]):.2f}x" if flo else ""
            ),
            target=f"≤ {fmt_ns(TARGET_ALL_IN_NS)} and ≥ {TARGET_ALL_IN_PSUTIL:.0f}x psutil",
            verdict=verdict(median(strobo) <= TARGET_ALL_IN_NS and speedup >= TARGET_ALL_IN_PSUTIL),
        )
    )
    if wake:
        res.rows.append(
            Row(
                b,
                "all-in CPU per tick of a bare 1 kHz sleep/wake loop in C (no reads)",
                "—",
                "—",
                fmt_ns(median(wake)),
                ratio=f"strobo minus it {fmt_ns(median(strobo) - median(wake))}",
                target="—",
                verdict="info",
            )
        )
    res.details.append(
        "all-in: the default set read at each source's natural resolution (memory and disk "
        "every 1 s, cpu every 10 ms, the rest every tick); the floor reads every seed file "
        "every tick (the design this replaces); the bare loop is floor.c's timer mode reading "
        "nothing, what any sampler that sleeps between ticks pays here"
    )
