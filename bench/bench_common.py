"""Shared pieces of the benchmark suite: result rows, statistics, RSS, the C floor, the machine."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
UNBUDGETED: dict[str, Any] = {"max_overhead": None}
"""The keywords of every Sampler a benchmark of cost makes: it measures the rates it asks for.
The default overhead budget would slow the costliest sources where the machine is slow or
loaded (at 10 kHz here it read the process source every 819 ms instead of every 0.1 ms) and so
flatter the very figure under test."""


@dataclass
class Row:
    """One line of the results table.

    ``strobo``, ``psutil`` and ``floor`` are already formatted (with units); ``ratio`` says what
    is divided by what; ``verdict`` is ``PASS``, ``MISS`` or ``info`` (no target).
    """

    bench: str
    measure: str
    strobo: str
    psutil: str = "—"
    floor: str = "—"
    ratio: str = "—"
    target: str = "—"
    verdict: str = "info"


@dataclass
class BenchResult:
    """What one benchmark returns: table rows, free-form detail lines and raw numbers (JSON)."""

    name: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    other_cores: list[float] = field(default_factory=list)  # see OtherLoad, one per timed run

    def contention(self) -> str:
        """One line on how busy other processes kept the machine during the timed runs."""
        if not self.other_cores:
            return "other processes' CPU: not measured"
        return (
            f"other processes used {median(self.other_cores):.2f} cores (median; max "
            f"{max(self.other_cores):.2f}) of {os.cpu_count()} during the timed runs"
        )


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return float(statistics.median(values))


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median, in percent: how noisy repeated measurements were."""
    m = median(values)
    return 100.0 * (max(values) - min(values)) / m if m else 0.0


def verdict(ok: bool) -> str:
    """``PASS`` or ``MISS``."""
    return "PASS" if ok else "MISS"


def fmt_ns(ns: float) -> str:
    """A duration in ns, printed in the unit that keeps 3-4 significant digits."""
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs" if ns < 1e4 else f"{ns / 1e3:.1f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms" if ns < 1e7 else f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_bytes(n: float) -> str:
    """A byte count in KiB/MiB/GiB."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{n:.0f} B"


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm (bytes)."""
    with open("/proc/self/statm", "rb") as f:
        fields = f.read().split()
    return int(fields[1]) * PAGE_SIZE


def cpu_jiffies() -> tuple[int, int]:
    """(all, steal) jiffies of the machine so far, from the first line of /proc/stat."""
    with open("/proc/stat", "rb") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # guest and guest_nice are already counted in user and nice
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of CPU time the hypervisor gave to others between two :func:`cpu_jiffies`."""
    total = after[0] - before[0]
    return 100.0 * (after[1] - before[1]) / total if total > 0 else 0.0


def process_cpu_ns() -> int:
    """CPU time of this process so far, ns: ``CLOCK_PROCESS_CPUTIME_ID``.

    Read when the threads measured have stopped (joined) or sleep, it is exact: the kernel
    brings only the calling thread up to date, and a stopped or sleeping thread's time is
    already counted. Not ``os.times()``: it counts clock ticks (10 ms at USER_HZ = 100), which
    over a 2 s run at 1 kHz is 5 µs per tick, a quarter of what a wake costs here."""
    return time.process_time_ns()


# A timed run during which other processes used less than this many cores counts as quiet.
QUIET_CORES = 0.25


class OtherLoad:
    """CPU used by every other process on the machine over a window, in cores.

    Busy time of the whole machine (/proc/stat: everything but idle and iowait) minus the CPU
    time of this process and of the children it reaped in the window (``os.times``), divided by
    the wall time. On a shared machine this says how much of it someone else was using while a
    benchmark ran. Resolution is one clock tick (10 ms) per window.
    """

    _HZ = os.sysconf("SC_CLK_TCK")

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._busy0 = self._busy_s()
        self._own0 = self._own_s()

    @classmethod
    def _busy_s(cls) -> float:
        with open("/proc/stat", "rb") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal: busy = all but idle, iowait, steal
        return (v[0] + v[1] + v[2] + v[5] + v[6]) / cls._HZ

    @staticmethod
    def _own_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def cores(self) -> float:
        """Cores' worth of CPU that other processes used since construction."""
        wall = time.monotonic() - self._t0
        others = (self._busy_s() - self._busy0) - (self._own_s() - self._own0)
        return max(0.0, others / wall) if wall > 0 else 0.0


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays the table."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Floor:
    """The raw-read floor: bench/floor.c compiled with the system C compiler into a temp dir."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="stroboscope-floor-")
        self.exe: Path | None = None
        self.error: str | None = None
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            self.error = "no C compiler (cc) found"
            return
        exe = Path(self._dir.name) / "floor"
        proc = subprocess.run(
            [cc, "-O2", "-o", str(exe), str(BENCH_DIR / "floor.c")],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            self.error = f"cc -O2 floor.c failed: {proc.stderr.strip()[:500]}"
            return
        self.exe = exe
        self.compiler = cc

    def measure(self, batches: int = 5, batch_ms: float = 30.0) -> dict[str, float]:
        """Run the floor once: median ns per iteration of each variant and of each file alone."""
        if self.exe is None:
            raise RuntimeError(self.error or "floor not built")
        out = subprocess.run(
            [str(self.exe), "--batches", str(batches), "--batch-ms", str(batch_ms)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        result: dict[str, float] = json.loads(out)["ns_per_iter"]
        return result

    def start_timer(
        self, tick_ns: int, variant: str, pid: int | None = None, seconds: float = 3600.0
    ) -> subprocess.Popen[str]:
        """Start the floor's timer mode (reads ``variant`` every ``tick_ns``) in the background.

        It ends after ``seconds`` or at :meth:`stop_timer`, whichever comes first.
        """
        if self.exe is None:
            raise RuntimeError(self.error or "floor not built")
        cmd = [
            str(self.exe),
            "--tick-ns",
            str(tick_ns),
            "--seconds",
            str(seconds),
            "--variant",
            variant,
        ]
        if pid is not None:
            cmd += ["--pid", str(pid)]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)

    @staticmethod
    def stop_timer(proc: subprocess.Popen[str], wait: bool = False) -> dict[str, Any]:
        """Stop a timer started by :meth:`start_timer` and return its JSON result.

        With ``wait`` it is left to end by itself; otherwise it gets SIGTERM now.
        """
        if not wait and proc.poll() is None:
            proc.terminate()
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"floor timer mode failed with exit code {proc.returncode}")
        result: dict[str, Any] = json.loads(out)
        return result

    def timer(self, tick_ns: int, seconds: float, variant: str) -> dict[str, Any]:
        """Run the floor's timer mode for ``seconds`` and return its JSON result."""
        return self.stop_timer(self.start_timer(tick_ns, variant, seconds=seconds), wait=True)

    def close(self) -> None:
        """Remove the temp dir."""
        self._dir.cleanup()


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_revision() -> str:
    """Short commit of the checkout the bench runs from, with ``+dirty`` when it has changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_DIR), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict[str, str]:
    """What the numbers were measured on (no paths of this machine)."""
    import numpy
    import psutil
    import pyarrow
    import stroboscope

    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "stroboscope": f"{getattr(stroboscope, '__version__', '?')} (git {git_revision()})",
        "psutil": psutil.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }
