"""What the SystemMonitor tests share: the recording sender, the monitor under test, waiting for
its rows, and the exact key set a published event holds."""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

from stroboscope import available_sources
from stroboscope.compat import SystemMonitor
from stroboscope.senders import AbstractBackendSender, StatsDict

MiB = 1048576.0
GPU_AVAILABLE = any(s["name"] == "gpu" and s["available"] for s in available_sources())

BASE_KEYS = {
    "cpu",
    "memory",
    "network",
    "disk",
    "proc.memory.availableMB",
    "proc.memory.rssMB",
    "proc.memory.percent",
    "proc.cpu.threads",
}
GPU_REQUIRED = ("gpu", "memory", "memoryAllocated", "temp")
GPU_POWER = ("powerWatts", "powerPercent")


class Recorder(AbstractBackendSender):
    """Keeps every event it is given (a subclass of the ABC, as the users' senders are)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed = 0
        self.cond = threading.Condition()

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        with self.cond:
            self.events.append(dict(event))
            self.cond.notify_all()

    def close(self) -> None:
        self.closed += 1

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= n, timeout), (
                f"got {len(self.events)} events, wanted {n}"
            )


def monitor(sender: Any, rate: float = 60.0, rank: int | None = None, **kw: Any) -> SystemMonitor:
    return SystemMonitor(os.getpid(), sender, rate, rank, **kw)


def wait_rows(mon: SystemMonitor, rows: int) -> None:
    """Wait until ``mon``'s sampler has written ``rows`` rows since it started: at its 10 ms
    interval, at least (rows - 1) x 10 ms of sampled time (its CPU % needs 100 ms), however
    busy the cores are. Never a set sleep: a loaded machine takes fewer ticks in one."""
    deadline = time.monotonic() + 60
    while mon.raw_sampler.stats().rows_written < rows:
        assert time.monotonic() < deadline, f"fewer than {rows} rows after 60 s"
        time.sleep(0.01)


def check_keys(event: dict[str, Any], prefix: str, gpu_count: int) -> None:
    expected = {prefix + k for k in BASE_KEYS}
    for i in range(gpu_count):
        expected |= {f"{prefix}gpu.{i}.{k}" for k in GPU_REQUIRED}
    optional = {f"{prefix}gpu.{i}.{k}" for i in range(gpu_count) for k in GPU_POWER}
    assert expected <= set(event), f"missing keys: {sorted(expected - set(event))}"
    assert set(event) - expected <= optional, f"extra keys: {sorted(set(event) - expected)}"
    assert set(event[prefix + "network"]) == {"sent", "recv"}
    for key, value in event.items():
        values = value.values() if isinstance(value, dict) else [value]
        for v in values:
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (key, v)
            assert math.isfinite(v) and v >= 0, (key, v)
