"""The drop-in SystemMonitor beside the pure-Python monitor design, on a busy Python workload.

The pure-Python design is what stroboscope's ``SystemMonitor`` replaces: a Python thread that
wakes at the sampling rate, reads the same keys with psutil (pynvml too where GPUs exist; none
are used here), keeps the latest values and publishes them every ``sample_rate_seconds``.

Two settings, each side by side:

- ``publish 2 s``: both publish every 2 s. The pure-Python monitor samples once per publish (as the
  originals do); stroboscope samples at its default 10 ms in C++ and publishes the window's mean.
- ``sample 10 ms``: both sample every 10 ms and publish every 2 s.

For each: slowdown of a fixed CPU-bound Python workload against the same workload with no
monitor (median of interleaved repeats), CPU time the monitor used (its threads' CPU clocks:
the psutil thread; stroboscope's C++ sampler thread plus its Python publisher and sender
threads), and the samples per second it achieved while the workload held the GIL.

    python bench/monitor_bench.py [--seconds 4] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import psutil
from stroboscope.compat import SystemMonitor


def thread_cpu_s(thread: threading.Thread | None) -> float:
    """CPU time of a running Python thread, in seconds (0 when it is gone)."""
    if thread is None or thread.ident is None or not thread.is_alive():
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, ProcessLookupError):
        return 0.0


class PsutilMonitor:
    """The pure-Python monitor design: one psutil thread sampling the compatible key set.

    Parameters
    ----------
    pid : int
        Process whose ``proc.*`` keys are read.
    publish : callable
        Called with the latest values every ``sample_rate_seconds``.
    sample_rate_seconds : float
        Seconds between published events.
    sample_every : float
        Seconds between samples (equal to ``sample_rate_seconds`` in the originals).
    """

    def __init__(
        self,
        pid: int,
        publish: Callable[[dict[str, Any]], None],
        sample_rate_seconds: float,
        sample_every: float,
    ) -> None:
        self.process = psutil.Process(pid)
        self.publish = publish
        self.rate = sample_rate_seconds
        self.every = sample_every
        net = psutil.net_io_counters()
        self.network_init = {"sent": net.bytes_sent, "recv": net.bytes_recv}
        self.sampler: dict[str, Any] = {}
        self.samples = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        net = psutil.net_io_counters()
        mem = psutil.virtual_memory()
        s = self.sampler
        s["cpu"] = psutil.cpu_percent()
        s["memory"] = mem.percent
        s["network"] = {
            "sent": net.bytes_sent - self.network_init["sent"],
            "recv": net.bytes_recv - self.network_init["recv"],
        }
        s["disk"] = psutil.disk_usage("/").percent
        s["proc.memory.availableMB"] = mem.available / 1048576.0
        s["proc.memory.rssMB"] = self.process.memory_info().rss / 1048576.0
        s["proc.memory.percent"] = self.process.memory_percent()
        s["proc.cpu.threads"] = self.process.num_threads()
        self.samples += 1

    def _run(self) -> None:
        next_sample = next_publish = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_sample:
                self._sample()
                next_sample += self.every
            if now >= next_publish:
                self.publish(dict(self.sampler))
                next_publish += self.rate
            self._stop.wait(max(0.0, min(next_sample, next_publish) - time.monotonic()))
        self.cpu_s = time.thread_time()

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join()
        self.publish(dict(self.sampler))


def workload(iterations: int) -> float:
    """A CPU-bound pure-Python loop; returns its wall time in seconds."""
    start = time.perf_counter()
    acc = 0
    for i in range(iterations):
        acc = (acc + i * i) % 1000003
    return time.perf_counter() - start


def calibrate(seconds: float) -> int:
    n = 200_000
    while (t := workload(n)) < 0.2:
        n *= 2
    return int(n * seconds / t)


@dataclass
class Run:
    monitor: str
    setting: str
    wall_s: float
    monitor_cpu_s: float
    samples_per_s: float
    events: int


def run_none(n: int) -> Run:
    return Run("none", "-", workload(n), 0.0, 0.0, 0)


def run_psutil(n: int, setting: str) -> Run:
    events: list[dict[str, Any]] = []
    every = 2.0 if setting == "publish 2 s" else 0.01
    mon = PsutilMonitor(os.getpid(), events.append, 2.0, every)
    mon.start()
    start = time.perf_counter()
    wall = workload(n)
    elapsed = time.perf_counter() - start
    mon.shutdown()
    return Run(
        "pure-Python (psutil thread)", setting, wall, mon.cpu_s, mon.samples / elapsed, len(events)
    )


def run_strobo(n: int, setting: str) -> Run:
    events: list[dict[str, Any]] = []
    mon = SystemMonitor(os.getpid(), events.append, 2, interval=0.01)
    mon.start()
    start = time.perf_counter()
    wall = workload(n)
    elapsed = time.perf_counter() - start
    stats = mon.raw_sampler.stats()
    # The Python side: the publisher thread and the sender worker (private, read for the bench).
    py_threads = [mon._publisher._thread] + [w._thread for w in mon._fanout.workers]
    py_cpu = sum(thread_cpu_s(t) for t in py_threads)
    mon.shutdown()
    return Run(
        "stroboscope SystemMonitor",
        setting,
        wall,
        stats.thread_cpu_ns / 1e9 + py_cpu,
        stats.ticks_taken / elapsed,
        len(events),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=4.0,
        help="length of the workload without a monitor (default 4)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    parser.add_argument("--json", default=None, help="also write the raw runs to this file")
    args = parser.parse_args(argv)

    n = calibrate(args.seconds)
    settings = ("publish 2 s", "sample 10 ms")
    jobs: list[Callable[[], Run]] = [functools.partial(run_none, n)]
    for setting in settings:
        jobs.append(functools.partial(run_psutil, n, setting))
        jobs.append(functools.partial(run_strobo, n, setting))
    runs: list[Run] = []
    for repeat in range(args.repeats):
        # Rotate the order each repeat, so no configuration always runs first or last.
        k = repeat % len(jobs)
        runs.extend(job() for job in jobs[k:] + jobs[:k])
    bare = [r.wall_s for r in runs if r.monitor == "none"]
    base = statistics.median(bare)

    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
    print(
        f"workload: {n} iterations, {base:.2f} s without a monitor (median of "
        f"{args.repeats}, {min(bare):.2f}..{max(bare):.2f} s); numbers below are medians of "
        f"{args.repeats} interleaved runs"
    )
    print()
    header = (
        "setting",
        "monitor",
        "slowdown (min..max)",
        "monitor CPU",
        "CPU % of wall",
        "samples/s",
    )
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for setting in settings:
        for name in ("pure-Python (psutil thread)", "stroboscope SystemMonitor"):
            mine = [r for r in runs if r.monitor == name and r.setting == setting]
            wall = statistics.median(r.wall_s for r in mine)
            cpu = statistics.median(r.monitor_cpu_s for r in mine)
            rate = statistics.median(r.samples_per_s for r in mine)
            slow = 100.0 * (wall / base - 1.0)
            lo, hi = (100.0 * (f(r.wall_s for r in mine) / base - 1.0) for f in (min, max))
            print(
                f"{setting} | {name} | {slow:+.1f} % ({lo:+.1f}..{hi:+.1f}) | "
                f"{cpu * 1e3:.0f} ms | {100.0 * cpu / wall:.2f} % | {rate:.1f}"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"base_s": base, "iterations": n, "runs": [asdict(r) for r in runs]}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
