"""Benchmark: does GPU polling make the /proc tick late? 8 fake GPUs, every GPU feature on.

Issue 14 ("Performance"). Three configurations, each in a fresh child process, in one run:

- ``proc``: a stroboscope Sampler at 1 kHz with the default non-GPU sources (cpu, memory,
  network, disk, diskio, process: the /proc tick);
- ``gpu``: the same plus ``gpu`` (own poll thread, every tick unless ``--gpu-interval``;
  driver-sample recorder on) and ``gpu_gpm`` (GPM pairs on its own thread, <= 10 Hz), on 8
  fake GPUs serving every field, process lists and utilisation, driver samples and all twelve
  GPM metrics;
- ``psutil``: the baseline of bench/run.py: a Python thread reading the seed metric set with
  psutil on 1 ms deadlines (bench/psutil_baseline.py), no GPU.

Reported per configuration: the tick's lateness p50/p99/max from the sampler's histogram,
p99.9 from the rows (:func:`row_lateness`), ticks missed, and each new thread's CPU from
``/proc/self/task/TID/schedstat``: the sampler thread matches ``stats().thread_cpu_ns``, the
others are the GPU poll threads (per GPU per second). Process CPU (``getrusage``) cross-checks.

The fake NVML answers in nanoseconds: this is our overhead around NVML, not the driver's latency.

Usage::

    python bench/gpu_poll_bench.py                    # 25 s per configuration, 8 GPUs
    python bench/gpu_poll_bench.py --seconds 5 --devices 2 --gpu-interval 0.1 --gpm-interval 0.125
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import UNBUDGETED, OtherLoad, cpu_model, log, machine
from gpu_bench import compile_fake
from gpu_bench import fake_script as base_script
from gpu_bench_worker import _task_runtime_ns

PROC_SOURCES = ("cpu", "memory", "network", "disk", "diskio", "process")
# NVML's GPM metric ids (nvml.h): SM, occupancy, tensor, HMMA, DRAM, FP64/32/16, PCIe, NVLink.
GPM_IDS = (2, 3, 5, 7, 10, 11, 12, 13, 20, 21, 60, 61)
SAMPLE_KINDS = ("power", "gpu_util", "mem_util", "sm_clock", "mem_clock")


def fake_script(devices: int) -> str:
    """gpu_bench's scenario plus every counter field, field times, driver samples and GPM."""
    lines = [base_script(devices)]
    for d in range(devices):
        lines += [
            f"set {d} pcie_tx 1000 2000 4000 8000",
            f"set {d} pcie_rx 500 1500 2500",
            f"set {d} nvlink_tx 10 20 30",
            f"set {d} nvlink_rx 5 15 25",
            f"set {d} ecc_corrected 1",
            f"field_time {d} 1000000 1000",
            f"process_util {d} self 40/20/1/2 50/25/1/2",
            f"gpm {d} on",
        ]
        lines += [f"gpm_metric {d} {m} {10 + m} {20 + m}" for m in GPM_IDS]
        stamps = " ".join(f"{1_000_000 + 16_000 * k}:{100 + k}" for k in range(64))
        lines += [f"samples {d} {kind} {stamps}" for kind in SAMPLE_KINDS]
    return "\n".join(lines) + "\n"


def percentile(values: list[int], q: float) -> float:
    """The q-quantile (0..1) of ``values`` by the nearest-rank rule; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def row_lateness(
    mono_ns: list[int], interval_ns: int, p50_ns: int, cost_ns: float, bins: int = 200
) -> tuple[list[int], list[int]]:
    """Each row's lateness, rebuilt from ``mono_ns`` (the tick's wake-up time): two bounds.

    Deadlines lie on the grid ``origin + k * interval``; after a tick ends, the next deadline is
    the first grid point after that end (missed ones are skipped, never bunched). A row's
    deadline is thus a grid point after the previous row's time and at or before its own; where
    there is one such point the lateness is exact. Where there are several, either the previous
    tick ran past a deadline (the later point) or this wake-up came more than an interval late
    (the earlier one): the low bound takes the last point at or before the row (lateness modulo
    the interval), the high bound the first one after the previous row plus the mean tick cost.

    The origin is private to the core: its residue comes from the rows' residues, cut at the
    widest empty arc of the circle (so they do not wrap) and shifted so that their median equals
    the histogram's p50 (a bucket midpoint, within ~3 %). The caller shows the rows' p99 beside
    the histogram's as the check.
    """
    if not mono_ns:
        return [], []
    residues = [t % interval_ns for t in mono_ns]
    counts = [0] * bins
    for r in residues:
        counts[r * bins // interval_ns] += 1
    best_len, best_end, run = 0, 0, 0
    for i in range(2 * bins):  # twice round: runs of empty bins that wrap count whole
        run = run + 1 if counts[i % bins] == 0 else 0
        if run > best_len:
            best_len, best_end = min(run, bins), i % bins
    cut = ((best_end + 1) % bins) * interval_ns // bins  # the first bin after the empty arc
    unwrapped = sorted((r - cut) % interval_ns for r in residues)
    typical = unwrapped[len(unwrapped) // 2]
    origin = (cut + typical - p50_ns) % interval_ns
    low = [(t - origin) % interval_ns for t in mono_ns]
    high = low[:1]
    for prev, now in zip(mono_ns, mono_ns[1:]):
        end = prev + round(cost_ns)
        deadline = origin + ((end - origin) // interval_ns + 1) * interval_ns
        high.append(max(now - deadline, (now - origin) % interval_ns))
    return low, high


def _thread_cpu(before: set[int], runtimes: dict[int, int], sampler_cpu_ns: int) -> dict[str, Any]:
    """Split the CPU of the threads started since ``before`` into the sampler's and the rest."""
    new = {tid: ns for tid, ns in runtimes.items() if tid not in before}
    if not new:
        return {"sampler_tid_cpu_ns": None, "other_threads_cpu_ns": 0, "other_threads": 0}
    sampler_tid = min(new, key=lambda t: abs(new[t] - sampler_cpu_ns))
    others = [new[tid] for tid in sorted(new) if tid != sampler_tid]  # creation order
    return {
        "sampler_tid_cpu_ns": new[sampler_tid],
        "other_threads_cpu_ns": sum(others),
        "other_threads": len(others),
        "other_threads_each_cpu_ns": others,
    }


def _fake_calls(function: str, devices: int) -> int | None:
    """The fake's count of ``function`` calls over all devices (None without the fake)."""
    path = os.environ.get("STROBOSCOPE_NVML_LIBRARY")
    if not path:
        return None
    import ctypes

    lib = ctypes.CDLL(path)
    fn = lib.fake_nvml_calls
    fn.restype = ctypes.c_ulonglong
    fn.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    return sum(int(fn(d, function.encode())) for d in range(devices))


def _resolution_s(name: str) -> float | None:
    """A source's declared resolution in seconds (None: every tick)."""
    import stroboscope

    found = [s["resolution_ns"] for s in stroboscope.available_sources() if s["name"] == name]
    return found[0] / 1e9 if found and found[0] > 0 else None


def measure_sampler(with_gpu: bool, opts: dict[str, Any]) -> dict[str, Any]:
    """One stroboscope configuration in this process: lateness, misses and CPU."""
    import stroboscope

    interval: float = opts["interval"]
    spec: dict[str, float | None] = dict.fromkeys(PROC_SOURCES)
    if with_gpu:
        spec["gpu"] = opts["gpu_interval"]
        # In a mapping None means every tick: without --gpm-interval, the source's own plan.
        spec["gpu_gpm"] = opts["gpm_interval"] or _resolution_s("gpu_gpm")
    capacity = 1 << max(10, math.ceil(math.log2(opts["seconds"] / interval * 1.2 + 1)))
    s = stroboscope.Sampler(
        interval, sources=spec, gpu_samples=with_gpu, capacity=capacity, **UNBUDGETED
    )
    before = set(_task_runtime_ns())
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    reads0 = _fake_calls("nvmlDeviceGetFieldValues", opts["devices"]) if with_gpu else None
    gpm0 = _fake_calls("nvmlGpmSampleGet", opts["devices"]) if with_gpu else None
    s.start()
    t0 = time.perf_counter()
    time.sleep(opts["seconds"])
    runtimes = _task_runtime_ns()
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    elapsed = time.perf_counter() - t0
    reads1 = _fake_calls("nvmlDeviceGetFieldValues", opts["devices"]) if with_gpu else None
    gpm1 = _fake_calls("nvmlGpmSampleGet", opts["devices"]) if with_gpu else None
    st = s.stats()
    s.stop()
    table = s.snapshot().to_arrow()
    mono = table.column("mono_ns").to_pylist()
    low, high = row_lateness(mono, st.interval_ns, st.lateness_p50_ns, st.cost_mean_ns)
    high = [min(h, st.lateness_max_ns) for h in high]  # the histogram's max is exact
    threads = _thread_cpu(before, runtimes, st.thread_cpu_ns)
    process_cpu_s = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    out: dict[str, Any] = {
        "config": "gpu" if with_gpu else "proc",
        "seconds": elapsed,
        "columns": len(table.column_names),
        "ticks_scheduled": st.ticks_scheduled,
        "ticks_taken": st.ticks_taken,
        "ticks_missed": st.ticks_missed,
        "rows": table.num_rows,
        "rows_lost": st.rows_overwritten,
        "lateness_p50_ns": st.lateness_p50_ns,
        "lateness_p99_ns": st.lateness_p99_ns,
        "lateness_max_ns": st.lateness_max_ns,
        "rows_lateness_p50_ns": percentile(low, 0.5),
        "rows_lateness_p99_ns": [percentile(low, 0.99), percentile(high, 0.99)],
        "rows_lateness_p999_ns": [percentile(low, 0.999), percentile(high, 0.999)],
        "rows_ambiguous": sum(a != b for a, b in zip(low, high)),
        "tick_cost_mean_ns": st.cost_mean_ns,
        "tick_cost_p99_ns": st.cost_p99_ns,
        "sampler_cpu_ns": st.thread_cpu_ns,
        "process_cpu_s": process_cpu_s,
        **threads,
    }
    if with_gpu:
        out["gpu_source"] = {
            x.name: {"reads": x.reads, "failures": x.failures, "reason": x.reason}
            for x in st.sources
            if x.name.startswith("gpu")
        }
        if reads0 is not None and reads1 is not None:
            out["gpu_readings_per_s_per_gpu"] = (reads1 - reads0) / elapsed / opts["devices"]
        if gpm0 is not None and gpm1 is not None:
            out["gpm_samples_per_s_per_gpu"] = (gpm1 - gpm0) / elapsed / opts["devices"]
    s.close()
    del s, table
    gc.collect()
    return out


def measure_psutil(opts: dict[str, Any]) -> dict[str, Any]:
    """The psutil baseline at the same rate: a Python thread on absolute deadlines."""
    import threading

    from psutil_baseline import SeedSampler, ThreadSampler

    seed = SeedSampler()
    stamps: list[int] = []
    tid: list[int] = []

    def sample() -> tuple[Any, ...]:
        if not tid:
            tid.append(threading.get_native_id())
        stamps.append(time.perf_counter_ns())
        return seed.sample()

    t = ThreadSampler(sample, opts["interval"])
    before = _task_runtime_ns()
    t.start()
    time.sleep(opts["seconds"])
    after = _task_runtime_ns()
    t.stop()
    interval_ns = round(opts["interval"] * 1e9)
    start_ns = round(t.started_at * 1e9)  # perf_counter and perf_counter_ns share a clock
    late = [ts - (start_ns + k * interval_ns) for k, ts in enumerate(stamps)]
    cpu = after.get(tid[0], 0) - before.get(tid[0], 0) if tid else 0
    return {
        "config": "psutil",
        "seconds": opts["seconds"],
        "samples": len(stamps),
        "achieved_per_s": t.achieved_per_s,
        "rows_lateness_p50_ns": percentile(late, 0.5),
        "rows_lateness_p99_ns": percentile(late, 0.99),
        "rows_lateness_p999_ns": percentile(late, 0.999),
        "lateness_max_ns": max(late, default=0),
        "thread_cpu_ns": cpu,
    }


def worker(opts: dict[str, Any]) -> dict[str, Any]:
    """One configuration in this (fresh) process, with the CPU other processes used meanwhile
    (a shared machine's noise: bench_common.OtherLoad)."""
    others = OtherLoad()
    if opts["config"] == "psutil":
        out = measure_psutil(opts)
    else:
        out = measure_sampler(opts["config"] == "gpu", opts)
    out["other_cores"] = others.cores()
    return out


def run_child(opts: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Run one configuration in a fresh process; its JSON result."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(opts)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{opts['config']} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _us(ns: float | list[float] | None) -> str:
    """Nanoseconds as µs; a [low, high] pair as "low to high" (or one number when they agree)."""
    if isinstance(ns, list):
        lo, hi = _us(ns[0]), _us(ns[1])
        return lo if lo == hi else f"{lo} to {hi}"
    return "—" if ns is None or math.isnan(ns) else f"{ns / 1e3:.1f}"


def summary(results: list[dict[str, Any]], devices: int) -> list[str]:
    """The results as Markdown table lines (one row per configuration and repeat)."""
    head = (
        "| config | lateness p50 µs | p99 µs | p99.9 µs (rows) | max µs | rows p99 µs (check) "
        "| ticks missed / scheduled | sampler CPU % | GPU threads CPU µs per GPU per s "
        "| process CPU % | other processes, cores |"
    )
    lines = [head, "|" + " --- |" * 11]
    for r in results:
        secs = r["seconds"]
        if r["config"] == "psutil":
            lines.append(
                f"| psutil thread | {_us(r['rows_lateness_p50_ns'])} "
                f"| {_us(r['rows_lateness_p99_ns'])} | {_us(r['rows_lateness_p999_ns'])} "
                f"| {_us(r['lateness_max_ns'])} | — | {r['achieved_per_s']:.0f}/s taken "
                f"| {100 * r['thread_cpu_ns'] / 1e9 / secs:.1f} | — | — | {r['other_cores']:.2f} |"
            )
            continue
        gpu_cpu = "—"
        if r["config"] == "gpu":
            gpu_cpu = f"{r['other_threads_cpu_ns'] / 1e3 / devices / secs:.1f}"
        sampler = r["sampler_tid_cpu_ns"] or r["sampler_cpu_ns"]
        lines.append(
            f"| {r['config']} | {_us(r['lateness_p50_ns'])} | {_us(r['lateness_p99_ns'])} "
            f"| {_us(r['rows_lateness_p999_ns'])} | {_us(r['lateness_max_ns'])} "
            f"| {_us(r['rows_lateness_p99_ns'])} | {r['ticks_missed']} / {r['ticks_scheduled']} "
            f"| {100 * sampler / 1e9 / secs:.1f} | {gpu_cpu} "
            f"| {100 * r['process_cpu_s'] / secs:.1f} | {r['other_cores']:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Build the fake library, run every configuration, print Markdown and (optionally) JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=25.0, help="per configuration (default 25)")
    p.add_argument("--devices", type=int, default=8, help="fake GPUs (default 8)")
    p.add_argument("--interval", type=float, default=0.001, help="base tick, s (default 0.001)")
    p.add_argument(
        "--gpu-interval",
        type=float,
        default=None,
        help="gpu source poll interval, s (default: the source's own, every tick)",
    )
    p.add_argument(
        "--gpm-interval",
        type=float,
        default=None,
        help="gpu_gpm poll interval, s (default: the source's own plan)",
    )
    p.add_argument("--repeats", type=int, default=1, help="rounds of the three (default 1)")
    p.add_argument("--no-psutil", action="store_true", help="skip the psutil baseline")
    p.add_argument("--json", type=Path, help="also write every number here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if not 1 <= args.devices <= 16:
        p.error(f"--devices must be 1..16 (the fake's limit), got {args.devices}")
    if args.seconds <= 0 or args.interval <= 0:
        p.error("--seconds and --interval must be positive")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stroboscope-gpu-poll-") as tmp:
        work = Path(tmp)
        lib = compile_fake(work)
        script = work / "fake.txt"
        script.write_text(fake_script(args.devices))
        env = dict(os.environ, STROBOSCOPE_NVML_LIBRARY=str(lib), FAKE_NVML_SCRIPT=str(script))
        base = {
            "seconds": args.seconds,
            "devices": args.devices,
            "interval": args.interval,
            "gpu_interval": args.gpu_interval,
            "gpm_interval": args.gpm_interval,
        }
        configs = ["proc", "gpu"] + ([] if args.no_psutil else ["psutil"])
        for rnd in range(args.repeats):
            for config in configs:
                log(f"round {rnd + 1}/{args.repeats}: {config}, {args.seconds:g} s ...")
                results.append(run_child({**base, "config": config}, env))
    info = machine()
    print(f"machine: {cpu_model()}, {info['cores']} cores; stroboscope {info['stroboscope']}")
    print(
        f"{args.devices} fake GPUs, base tick {args.interval * 1e3:g} ms, "
        f"{args.seconds:g} s per configuration, gpu every {args.gpu_interval or 'tick'}, "
        f"gpu_gpm every {args.gpm_interval or 'default'}"
    )
    for r in results:
        if r["config"] == "gpu":
            print(
                f"gpu: {r.get('gpu_readings_per_s_per_gpu', 0):.0f} readings/s per GPU, "
                f"{r.get('gpm_samples_per_s_per_gpu', 0):.1f} GPM samples/s per GPU, "
                f"{r['other_threads']} GPU threads, {r['columns']} columns, sources "
                f"{r['gpu_source']}"
            )
    print("\n".join(summary(results, args.devices)))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
