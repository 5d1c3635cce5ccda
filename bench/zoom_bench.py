"""How long the zooming report page takes to redraw a zoom to 1 s in headless Chromium, and
where that time goes.

Opens a page written by ``stroboscope report -o`` (``bench/report_bench.py --out DIR`` makes
the 1-hour 1 kHz one) at 1280 x HEIGHT, zooms to 1 s at ``--zooms`` places through the page's
``window.strobo.zoom`` hook (from the call to the second animation frame after it) and reports
the median wall time and the renderer's CPU time (DevTools ``ProcessTime``) over each, and the
page's own share (``window.strobo.lastComputeMs``: computing the points and handing them to
Bokeh). With ``--profile``, the same zooms under the DevTools CPU profiler, and the functions
with the most self time, by script (the page's own, Bokeh's, the browser's).

    python bench/zoom_bench.py DIR/report.html [--height 2400] [--zooms 15] [--profile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_common import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(page: Path, height: int, zooms: int, profile: bool) -> dict[str, Any]:
    """Open ``page`` and zoom to 1 s at ``zooms`` places; the figures of :mod:`zoom_bench`."""
    from _chromium import Browser

    with Browser(1280, height) as b:
        t = time.perf_counter()
        b.open(page.as_uri(), timeout=300)
        b.eval("window.strobo.ready", timeout=300)
        load = time.perf_counter() - t
        lo, hi = float(b.eval("window.strobo.shown().a")), float(b.eval("window.strobo.shown().b"))
        b.call("Performance.enable", session=True)

        def cpu() -> float:
            got = b.call("Performance.getMetrics", session=True)["metrics"]
            return float(next(m["value"] for m in got if m["name"] == "ProcessTime"))

        if profile:
            b.call("Profiler.enable", session=True)
            b.call("Profiler.setSamplingInterval", session=True, interval=200)
            b.call("Profiler.start", session=True)
        walls, cpus, computes, points = [], [], [], []
        for k in range(zooms):
            a = lo + (hi - lo) * (0.1 + 0.8 * k / max(zooms - 1, 1))
            c = cpu()
            walls.append(float(b.eval(f"window.strobo.zoom({a}, {a + 1.0})")))
            cpus.append((cpu() - c) * 1000)
            computes.append(float(b.eval("window.strobo.lastComputeMs")))
            points.append(int(b.eval("window.strobo.shown().points")))
        figures = int(b.eval("window.strobo.shown().figures"))
        top: list[tuple[float, str]] = []
        if profile:
            prof = b.call("Profiler.stop", session=True)["profile"]
            top = _self_times(prof)
        c = cpu()
        whole = float(b.eval(f"window.strobo.zoom({lo}, {hi})"))
        whole_cpu = (cpu() - c) * 1000
        errors = [m for m in b.console if not m.startswith(("log:", "info:"))]
        lighter = b.eval("window.strobo.lighter || []")
    return {
        "load_s": load,
        "wall_ms": statistics.median(walls),
        "wall_ms_max": max(walls),
        "cpu_ms": statistics.median(cpus),
        "compute_ms": statistics.median(computes),
        "points": int(statistics.median(points)),
        "figures": figures,
        "whole_ms": whole,
        "whole_cpu_ms": whole_cpu,
        "errors": len(errors),
        "lighter": lighter,
        "top": top,
    }


def _self_times(prof: dict[str, Any]) -> list[tuple[float, str]]:
    """Self time (ms) per function of a DevTools CPU profile, most first."""
    nodes = {n["id"]: n for n in prof["nodes"]}
    dt = prof.get("timeDeltas", [])
    self_us: Counter[int] = Counter()
    for node, d in zip(prof.get("samples", []), [*dt[1:], 0]):
        self_us[node] += d
    parent = {c: n["id"] for n in prof["nodes"] for c in n.get("children", [])}

    def name(node: int) -> str:
        f = nodes[node]["callFrame"]
        return f"{f.get('functionName') or '(anonymous)'}:{f.get('lineNumber', 0)}"

    by_fn: Counter[str] = Counter()
    for node, us in self_us.items():
        chain, at = [], node
        for _ in range(3):  # the function and two callers
            chain.append(name(at))
            if at not in parent:
                break
            at = parent[at]
        by_fn[" < ".join(chain)] += us
    return [(us / 1000, fn) for fn, us in by_fn.most_common(30)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--height", type=int, action="append", default=None)
    ap.add_argument("--zooms", type=int, default=15)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for height in args.height or [900, 2400]:
        r = measure(args.page, height, args.zooms, args.profile)
        print(
            f"1280x{height}: loaded in {r['load_s']:.1f} s; zoom to 1 s: {r['wall_ms']:.0f} ms "
            f"wall (median of {args.zooms}, max {r['wall_ms_max']:.0f}), renderer CPU "
            f"{r['cpu_ms']:.0f} ms, the page's own {r['compute_ms']:.1f} ms, {r['points']} "
            f"points, {r['figures']} figures redrawn; whole run {r['whole_ms']:.0f} ms (CPU "
            f"{r['whole_cpu_ms']:.0f} ms); console errors {r['errors']}; Bokeh's paint made "
            f"lighter: {', '.join(r['lighter']) or 'no'}"
        )
        for ms, fn in r["top"]:
            print(f"    {ms:8.1f} ms  {fn}")
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
