"""What a scope costs, side by side in one run: enter + exit of a scope disabled, enabled, with
edge rows and with NVTX, beside a ``perf_counter_ns()`` pair (the floor) and beside aitune's own
``collect_hardware_metrics`` when the aitune wheel and its dependencies are importable; the rate
of scopes the events log takes from one thread without loss; and the slowdown of a loop of tiny
scoped functions against the same loop unscoped.

Usage::

    python bench/scopes_bench.py [--n 200000] [--repeats 7] [--aitune DIR]

``--aitune DIR``: a directory holding the unpacked aitune package (``pip download --no-deps
aitune==0.6.0`` and unzip); its imports (pandas, pynvml, tabulate, psutil) must be installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import stroboscope.scopes as scopes
from bench_common import UNBUDGETED
from stroboscope import _core
from stroboscope.recording.sampler import Sampler


def _per_call_ns(body: Callable[[int], None], n: int, repeats: int) -> float:
    """Median over ``repeats`` runs of the time per iteration of ``body(n)``, in ns."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        body(n)
        runs.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(runs)


def _floor(n: int) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        clock()
        clock()


def _with(scope: Any) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            with scope:
                pass

    return body


def _with_new(n: int) -> None:
    annotate = scopes.annotate
    for _ in range(n):
        with annotate("step"):
            pass


def _empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def _calls(fn: Callable[[], int]) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            fn()

    return body


def _tiny() -> int:
    return 1


def _aitune_scope(path: str | None) -> Any:
    if path is None:
        return None
    sys.path.insert(0, path)
    os.environ["AITUNE_HARDWARE_METRICS"] = "1"
    try:
        from aitune.utils.monitoring import collect_hardware_metrics  # type: ignore
    except Exception as exc:  # its dependencies may be missing here
        print(f"aitune not importable: {exc!r}", file=sys.stderr)
        return None
    return collect_hardware_metrics


def _inside_fraction(edge_rows: bool, regions: int = 1000) -> float:
    """Share of 200 µs regions (200 µs apart) with a row inside them, sampling at 1 kHz."""
    import numpy as np

    with Sampler(
        0.001, sources=["memory"], edge_rows=edge_rows, capacity=1 << 14, **UNBUDGETED
    ) as s:
        for _ in range(regions):
            with scopes.annotate("short"):
                end = time.perf_counter() + 0.0002
                while time.perf_counter() < end:
                    pass
            time.sleep(0.0002)
        time.sleep(0.01)
    rows = s.snapshot().to_arrow().column("mono_ns").to_numpy()
    calls = s.scope_intervals()
    begins = calls.column("begin_ns").to_numpy()
    ends = calls.column("end_ns").to_numpy()
    first = np.minimum(np.searchsorted(rows, begins), len(rows) - 1)
    return float(np.mean((rows[first] >= begins) & (rows[first] < ends)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--aitune", default=None)
    args = parser.parse_args()
    n, reps = args.n, args.repeats
    rows: list[tuple[str, float]] = []

    loop = _per_call_ns(_empty_loop, n, reps)
    rows.append(("perf_counter_ns() pair (floor)", _per_call_ns(_floor, n, reps) - loop))
    kept = scopes.annotate("kept")
    rows.append(("disabled: with a kept scope", _per_call_ns(_with(kept), n, reps) - loop))
    rows.append(("disabled: with annotate('step')", _per_call_ns(_with_new, n, reps) - loop))
    plain = _per_call_ns(_calls(_tiny), n, reps)
    decorated = scopes.annotate()(_tiny)
    rows.append(
        ("disabled: decorated call - plain call", _per_call_ns(_calls(decorated), n, reps) - plain)
    )

    with Sampler(0.001, sources=["memory"], capacity=1 << 12, **UNBUDGETED):
        rows.append(("enabled: with a kept scope", _per_call_ns(_with(kept), n, reps) - loop))
        rows.append(("enabled: with annotate('step')", _per_call_ns(_with_new, n, reps) - loop))
        scoped = _per_call_ns(_calls(decorated), n, reps)
        rows.append(("enabled: decorated call - plain call", scoped - plain))
        slowdown = scoped / plain - 1
        nvtx_scope = scopes.annotate("nvtx", nvtx=True)
        rows.append(
            ("enabled + NVTX: with a kept scope", _per_call_ns(_with(nvtx_scope), n, reps) - loop)
        )
        # Scopes per second into the log, and whether every edge of them can be read back.
        first = _core.events_written()
        t0 = time.perf_counter_ns()
        _with(kept)(n)
        elapsed = time.perf_counter_ns() - t0
        batch = _core.events_read(first, _core.events_written())
        lost, kept_edges = int(batch.lost), len(batch)
    with Sampler(0.001, sources=["memory"], capacity=1 << 12, edge_rows=True, **UNBUDGETED) as s:
        rows.append(
            (
                "enabled + edge rows: with a kept scope",
                _per_call_ns(_with(kept), n // 10, reps) - loop,
            )
        )
        edge_stats = s.stats()

    ait = _aitune_scope(args.aitune)
    if ait is not None:
        scope = ait("aitune-step")
        rows.append(
            (
                "aitune collect_hardware_metrics (same name)",
                _per_call_ns(_with(scope), n // 20, 3) - loop,
            )
        )
        names = [ait(f"name-{i % 2}") for i in range(2)]

        def alternating(k: int) -> None:
            for i in range(k):
                with names[i % 2]:
                    pass

        rows.append(
            (
                "aitune collect_hardware_metrics (alternating names)",
                _per_call_ns(alternating, 200, 3) - loop,
            )
        )

    with open("/proc/cpuinfo") as info:
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if "model name" in ln), "?")
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; n={n}, median of {reps}\n")
    print("| what | ns per scope (enter + exit) |\n| --- | --- |")
    for what, ns in rows:
        print(f"| {what} | {ns:,.0f} |")
    print(
        f"\nscopes/s from one thread into the events log: {n / (elapsed / 1e9):,.0f} "
        f"({kept_edges} edges read back, {lost} lost)"
    )
    print(f"loop of tiny scoped functions while recording: {slowdown:+.1%} against the plain loop")
    print(f"edge rows: {edge_stats.ticks_requested} rows for {edge_stats.tick_requests} requests")
    with_edges = [_inside_fraction(True) for _ in range(3)]
    without = [_inside_fraction(False) for _ in range(3)]
    print(
        "1,000 regions of 200 µs at 1 kHz with a row inside them: "
        f"{statistics.median(with_edges):.1%} with edge rows, "
        f"{statistics.median(without):.1%} without (median of 3)"
    )


if __name__ == "__main__":
    main()
