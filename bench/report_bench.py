"""``stroboscope report`` of a 1-hour 1 kHz run (3.6M rows x 27 columns): build time, peak memory
and size of the zooming page (and of the static one), and how long the page takes to redraw a
zoom to 1 s in headless Chromium.

The run is synthetic but read as a live one is: each column has a value only on the rows its
source read (its declared period: cpu 10 ms, memory and disk 1 s, network and the process every
tick, pressure 100 ms, GPU 10 ms), null in between, with a monotonic clock that jitters by tens
of µs, and a scope table of a training loop (steps of 300 ms with forward, backward and
optimizer inside, a data loader on a second thread).

    python bench/report_bench.py [--seconds 3600] [--rate 1000] [--static] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_common import cpu_model

# (name, unit, kind, type, period in ms (0: every tick), generator)
Gen = Any


def _walk(rng: np.random.Generator, n: int, lo: float, hi: float, step: float) -> np.ndarray:
    x = np.cumsum(rng.normal(0, step, n)) + (lo + hi) / 2
    span = hi - lo
    x = lo + np.abs(((x - lo) % (2 * span)) - span) if span > 0 else x  # reflected into range
    return np.asarray(x)


def columns(
    rng: np.random.Generator, n_rows: int, rate: int
) -> list[tuple[str, str, str, Any, int, Any]]:
    """The 25 metric columns: (name, unit, kind, arrow type, period in rows, values)."""

    def every(ms: int) -> int:
        return max(1, round(ms * rate / 1000))

    def q(x: np.ndarray, quantum: float) -> np.ndarray:  # a share counted in whole jiffies
        return np.round(x / quantum) * quantum

    out: list[tuple[str, str, str, Any, int, Any]] = []
    p = every(10)
    m = -(-n_rows // p)
    busy = _walk(rng, m, 5, 95, 3)
    out += [
        ("cpu.util_pct", "%", "rate", pa.float64(), p, q(busy, 100 / 16)),
        ("cpu.user_pct", "%", "rate", pa.float64(), p, q(busy * 0.8, 100 / 16)),
        ("cpu.system_pct", "%", "rate", pa.float64(), p, q(busy * 0.15, 100 / 16)),
        ("cpu.iowait_pct", "%", "rate", pa.float64(), p, q(np.abs(rng.normal(0, 2, m)), 100 / 16)),
        ("proc.cpu_pct", "%", "rate", pa.float64(), p, q(busy * 1.6, 10.0)),
        ("threads.top0.tid", "id", "gauge", pa.int64(), p, 4000 + rng.integers(0, 4, m)),
        ("threads.top0.cpu_pct", "%", "rate", pa.float64(), p, q(busy, 10.0)),
        (
            "gpu.0.util_pct",
            "%",
            "gauge",
            pa.float64(),
            p,
            np.repeat(q(_walk(rng, m // 17 + 1, 0, 100, 8), 1), 17)[:m],
        ),
    ]
    p = every(1000)
    m = -(-n_rows // p)
    used = (20e9 + _walk(rng, m, 0, 4e9, 5e7)).astype(np.int64) // 4096 * 4096
    out += [
        ("mem.used_bytes", "bytes", "gauge", pa.int64(), p, used),
        ("mem.available_bytes", "bytes", "gauge", pa.int64(), p, 64 * 2**30 - used),
        ("mem.swap_used_bytes", "bytes", "gauge", pa.int64(), p, np.full(m, 0, np.int64)),
        ("mem.util_pct", "%", "gauge", pa.float64(), p, used / (64 * 2**30) * 100),
        (
            "disk.used_pct",
            "%",
            "gauge",
            pa.float64(),
            p,
            26.52012 + np.cumsum(rng.random(m) < 0.01) * 1e-6,
        ),
        (
            "disk.free_bytes",
            "bytes",
            "gauge",
            pa.int64(),
            p,
            300 * 2**30 - np.cumsum(rng.random(m) < 0.01) * 4096,
        ),
    ]
    p = every(100)
    m = -(-n_rows // p)
    out += [
        (
            "net.sent_bytes_per_s",
            "bytes/s",
            "rate",
            pa.float64(),
            p,
            np.round(_walk(rng, m, 0, 2e8, 5e6)),
        ),
        (
            "net.recv_bytes_per_s",
            "bytes/s",
            "rate",
            pa.float64(),
            p,
            np.round(_walk(rng, m, 0, 2e8, 5e6)),
        ),
        (
            "psi.cpu.some_pct",
            "%",
            "rate",
            pa.float64(),
            p,
            np.clip(_walk(rng, m, 0, 30, 2), 0, 100),
        ),
        (
            "psi.memory.some_pct",
            "%",
            "rate",
            pa.float64(),
            p,
            np.clip(_walk(rng, m, 0, 3, 0.2), 0, 100),
        ),
        ("psi.io.some_pct", "%", "rate", pa.float64(), p, np.clip(_walk(rng, m, 0, 10, 1), 0, 100)),
    ]
    p = 1
    sent = np.cumsum(rng.poisson(2000, n_rows) * (rng.random(n_rows) < 0.3)).astype(np.int64)
    out += [
        ("net.sent_bytes", "bytes", "counter", pa.int64(), p, sent),
        ("net.recv_bytes", "bytes", "counter", pa.int64(), p, sent // 2),
        (
            "proc.rss_bytes",
            "bytes",
            "gauge",
            pa.int64(),
            p,
            (2**30 + np.cumsum(rng.random(n_rows) < 0.001) * 2**21).astype(np.int64),
        ),
        (
            "proc.threads",
            "count",
            "gauge",
            pa.int64(),
            p,
            40 + np.cumsum(rng.choice([-1, 0, 1], n_rows, p=[0.0005, 0.999, 0.0005])),
        ),
        ("load.running", "count", "gauge", pa.int64(), p, rng.integers(1, 6, n_rows)),
        (
            "load.1m",
            "1",
            "gauge",
            pa.float64(),
            p,
            np.repeat(np.round(_walk(rng, n_rows // (5 * rate) + 1, 0, 8, 0.3), 2), 5 * rate)[
                :n_rows
            ],
        ),
    ]
    return out


def make_run(directory: Path, seconds: float, rate: int, seed: int = 1) -> Path:
    """Write ``run.parquet`` and ``run.scopes.parquet`` into ``directory``; return the first."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    period = 10**9 // rate
    mono = (10**12 + np.arange(n, dtype=np.int64) * period + rng.integers(0, 60_000, n)).astype(
        np.int64
    )
    anchor = 1_764_800_000 * 10**9
    fields = [pa.field("time", pa.timestamp("ns", "UTC")), pa.field("mono_ns", pa.int64())]
    arrays: list[pa.Array] = [pa.array(mono + anchor, pa.timestamp("ns", "UTC")), pa.array(mono)]
    for name, unit, kind, typ, every, values in columns(rng, n, rate):
        dense = np.zeros(n, dtype=np.float64 if pa.types.is_floating(typ) else np.int64)
        rows = np.arange(0, n, every)
        dense[rows] = np.asarray(values)[: len(rows)]
        mask = np.ones(n, bool)
        mask[rows] = False
        if name.startswith("gpu."):
            mask[int(n * 0.5) : int(n * 0.5) + 3 * rate] = True  # 3 s of failed GPU reads
        arrays.append(pa.array(dense, typ, mask=mask))
        fields.append(pa.field(name, typ, metadata={"unit": unit, "kind": kind}))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    path = directory / "run.parquet"
    pq.write_table(table, path)
    del table, arrays
    pq.write_table(scope_table(mono, seconds), directory / "run.scopes.parquet")
    return path


def scope_table(mono: np.ndarray, seconds: float) -> pa.Table:
    """A training loop: ``train`` around steps of 300 ms (forward 120, backward 140, optimizer
    30), a ``load`` of 200 ms on a second thread before each step."""
    start, end = int(mono[0]), int(mono[-1])
    ms = 1_000_000
    steps = np.arange(start + 1000 * ms, end - 1000 * ms, 300 * ms)
    rows: dict[str, list[Any]] = {
        k: [] for k in ("name", "path", "thread_id", "depth", "begin_ns", "end_ns")
    }

    def add(name: str, path: str, tid: int, depth: int, b: np.ndarray, e: np.ndarray) -> None:
        rows["name"] += [name] * len(b)
        rows["path"] += [path] * len(b)
        rows["thread_id"] += [tid] * len(b)
        rows["depth"] += [depth] * len(b)
        rows["begin_ns"] += b.tolist()
        rows["end_ns"] += e.tolist()

    add("train", "train", 1, 0, np.array([start + 500 * ms]), np.array([end - 500 * ms]))
    add("step", "train/step", 1, 1, steps, steps + 295 * ms)
    add("forward", "train/step/forward", 1, 2, steps + ms, steps + 121 * ms)
    add("backward", "train/step/backward", 1, 2, steps + 122 * ms, steps + 262 * ms)
    add("optimizer", "train/step/optimizer", 1, 2, steps + 263 * ms, steps + 293 * ms)
    add("load", "load", 2, 0, steps - 250 * ms, steps - 50 * ms)
    return pa.table(
        {
            "name": pa.array(rows["name"], pa.string()),
            "path": pa.array(rows["path"], pa.string()),
            "thread_id": pa.array(rows["thread_id"], pa.int64()),
            "stack_id": pa.array(rows["thread_id"], pa.uint64()),
            "depth": pa.array(rows["depth"], pa.int32()),
            "begin_ns": pa.array(rows["begin_ns"], pa.int64()),
            "end_ns": pa.array(rows["end_ns"], pa.int64()),
        }
    )


# Runs the command given after it in a child of its own and prints that child's rusage. The
# peak RSS of a process forked from this one would count this process's pages (the 1-hour table
# made in memory): the kernel keeps a forked child's high-water mark across exec. Forked from
# this small interpreter instead, the command's peak is its own.
_RUSAGE_OF = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime,
                  usage.ru_maxrss]))
"""


def build(run: Path, out: Path, static: bool) -> dict[str, float]:
    """Run ``stroboscope report`` in a child: its wall and CPU time, peak RSS, the page's size."""
    cmd = [sys.executable, "-m", "stroboscope", "report", str(run), "-o", str(out)]
    if static:
        cmd.append("--static")
    t = time.perf_counter()
    got = subprocess.run(
        [sys.executable, "-c", _RUSAGE_OF, *cmd], capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - t
    code, cpu, maxrss_kib = json.loads(got.stdout)
    if code:
        raise SystemExit(f"{' '.join(cmd)} exited {code}")
    return {
        "seconds": wall,
        "cpu_seconds": cpu,
        "peak_bytes": maxrss_kib * 1024,
        "page_bytes": out.stat().st_size,
    }


def redraw(page: Path, height: int) -> dict[str, float]:
    """Open the page in headless Chromium (1280 x ``height``): the time to load and decode,
    and the redraw of 9 zooms to 1 s (from the call to the second frame after it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _chromium import Browser

    with Browser(1280, height) as b:
        t = time.perf_counter()
        b.open(page.as_uri(), timeout=300)
        b.eval("window.strobo.ready", timeout=300)
        load = time.perf_counter() - t
        lo, hi = float(b.eval("window.strobo.shown().a")), float(b.eval("window.strobo.shown().b"))
        b.call("Performance.enable", session=True)

        def cpu() -> float:  # the renderer process's CPU time (s): what a busy machine slows
            got = b.call("Performance.getMetrics", session=True)["metrics"]
            return float(next(m["value"] for m in got if m["name"] == "ProcessTime"))

        times, cpus = [], []
        for a in np.linspace(lo + (hi - lo) * 0.1, lo + (hi - lo) * 0.9, 9):
            c = cpu()
            times.append(float(b.eval(f"window.strobo.zoom({a}, {a + 1.0})")))
            cpus.append((cpu() - c) * 1000)
        figures = int(b.eval("window.strobo.shown().figures"))
        c = cpu()
        whole = float(b.eval(f"window.strobo.zoom({lo}, {hi})"))
        whole_cpu = (cpu() - c) * 1000
        errors = [c for c in b.console if not c.startswith(("log:", "info:"))]
    return {
        "load_s": load,
        "zoom_1s_ms_median": float(np.median(times)),
        "zoom_1s_ms_max": max(times),
        "figures": figures,
        "zoom_1s_cpu_ms_median": float(np.median(cpus)),
        "zoom_whole_ms": whole,
        "zoom_whole_cpu_ms": whole_cpu,
        "console_errors": len(errors),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--static", action="store_true", help="also build the static page")
    ap.add_argument("--out", default=None, help="keep the run and pages in this directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.out or tmp)
        d.mkdir(parents=True, exist_ok=True)
        run = d / "run.parquet"
        if not run.exists():
            make_run(d, args.seconds, args.rate)
        meta = pq.read_metadata(run)
        print(f"cpu: {cpu_model()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        print(f"run: {meta.num_rows:,} rows x {meta.num_columns} columns")
        pages = [("zooming page", "report.html", False)]
        if args.static:
            pages.append(("static page", "static.html", True))
        for what, name, static in pages:
            got = build(run, d / name, static)
            print(
                f"{what}: {got['seconds']:.1f} s ({got['cpu_seconds']:.1f} s CPU), "
                f"peak {got['peak_bytes'] / 2**20:.0f} MiB, page {got['page_bytes'] / 1e6:.1f} MB"
            )
        for height in (900, 2400):
            r = redraw(d / "report.html", height)
            print(
                f"chromium 1280x{height}: loaded and decoded in {r['load_s']:.1f} s; a zoom to "
                f"1 s redraws in {r['zoom_1s_ms_median']:.0f} ms (median of 9, max "
                f"{r['zoom_1s_ms_max']:.0f}; renderer CPU {r['zoom_1s_cpu_ms_median']:.0f} ms; "
                f"{r['figures']} figures in view); back to the whole run "
                f"{r['zoom_whole_ms']:.0f} ms (CPU {r['zoom_whole_cpu_ms']:.0f} ms); console "
                f"errors {r['console_errors']}"
            )
        print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
