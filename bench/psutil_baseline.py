"""The baseline: a pure-Python psutil sampler collecting the same values as stroboscope.

This is what the training monitors stroboscope replaces do: a Python thread that wakes at the
requested rate and calls psutil for the seed metric set, keeping each sample.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import psutil
from bench_common import process_cpu_ns

Sample = tuple[Any, ...]


class SeedSampler:
    """One call of :meth:`sample` reads the seed metric set with psutil.

    System CPU %, memory % and available bytes, network bytes sent/received, disk % of ``/``,
    and the process's RSS, memory % and threads. The :class:`psutil.Process` is built once, as a
    monitor would.
    """

    def __init__(self) -> None:
        self.process = psutil.Process()
        psutil.cpu_percent(None)  # the first call only primes the counters

    def sample(self) -> Sample:
        """Read every seed value once; returns them as a tuple."""
        mem = psutil.virtual_memory()
        net = psutil.net_io_counters()
        proc = self.process
        return (
            psutil.cpu_percent(None),
            mem.percent,
            mem.available,
            net.bytes_sent,
            net.bytes_recv,
            psutil.disk_usage("/").percent,
            proc.memory_info().rss,
            proc.memory_percent(),
            proc.num_threads(),
        )

    def split(self) -> dict[str, Callable[[], object]]:
        """Each psutil call of :meth:`sample` alone, by name (for a per-call cost split)."""
        proc = self.process
        return {
            "cpu_percent": lambda: psutil.cpu_percent(None),
            "virtual_memory": psutil.virtual_memory,
            "net_io_counters": psutil.net_io_counters,
            "disk_usage('/')": lambda: psutil.disk_usage("/"),
            "Process.memory_info": proc.memory_info,
            "Process.memory_percent": proc.memory_percent,
            "Process.num_threads": proc.num_threads,
        }


class ProcessSampler:
    """The values of stroboscope's ``process`` source, read with psutil for one process.

    CPU times, RSS, memory % and threads (I/O bytes and context switches are ``process_io``'s).
    """

    def __init__(self) -> None:
        self.process = psutil.Process()

    def sample(self) -> Sample:
        """Read every process value once; returns them as a tuple."""
        proc = self.process
        return (
            proc.cpu_times(),
            proc.memory_info().rss,
            proc.memory_percent(),
            proc.num_threads(),
        )


class ThreadSampler:
    """A Python thread calling ``sample`` on absolute deadlines ``interval`` seconds apart.

    When it falls behind it samples again at once (no skipping), which is the most this design
    can achieve. Every sample is kept in a list, like a monitor buffering for its sender.
    """

    def __init__(self, sample: Callable[[], Sample], interval: float) -> None:
        self._sample = sample
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="psutil-sampler", daemon=True)
        self.samples: list[Sample] = []
        self.started_at = 0.0
        self.stopped_at = 0.0

    def _run(self) -> None:
        interval = self._interval
        sample = self._sample
        keep = self.samples.append
        stop = self._stop.is_set
        self.started_at = deadline = time.perf_counter()
        while not stop():
            now = time.perf_counter()
            if now < deadline:
                time.sleep(deadline - now)
            keep(sample())
            deadline += interval
        self.stopped_at = time.perf_counter()

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread."""
        self._stop.set()
        self._thread.join()

    @property
    def achieved_per_s(self) -> float:
        """Samples taken per second of the thread's life."""
        elapsed = self.stopped_at - self.started_at
        return len(self.samples) / elapsed if elapsed > 0 else 0.0


def psutil_thread_cost(seconds: float, interval: float = 0.001) -> tuple[float, int]:
    """A psutil thread taking the seed sample every ``interval`` seconds for ``seconds``, the
    main thread asleep: ns of process CPU per sample taken (all in: the wake, the reads, the
    interpreter), and the samples taken. Behind its deadline it skips, never bunches (as the
    C sampler does), so the two are measured on the same schedule."""

    baseline = SeedSampler()
    stop = threading.Event()
    count = [0]

    def loop() -> None:
        deadline = time.monotonic()
        while not stop.is_set():
            baseline.sample()
            count[0] += 1
            deadline += interval
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                deadline = time.monotonic()  # behind: skip, never bunch

    t = threading.Thread(target=loop)
    c0 = process_cpu_ns()
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return (process_cpu_ns() - c0) / max(1, count[0]), count[0]
