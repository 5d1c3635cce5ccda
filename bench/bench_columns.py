"""Benchmark: what a row costs at many columns (issue 10, "the ring at many columns").

Two measurements, each at 25 and at 185 columns, interleaved and reported as medians with the
ratio taken within one run (the machine may be busy; only ratios measured side by side count):

- **push**: ``Ring::push`` alone, in a small C++ harness (embedded below) built with the
  package's Release flags (``-O3 -DNDEBUG``) against the repository's ``ring.cpp``; with
  ``--baseline REF`` also against ``ring.hpp``/``ring.cpp`` of a git revision (for example
  ``main`` before the row blocks), so the two layouts are timed in the same run. Rows are pushed
  into a 65,536-row ring (as a sampler's default) so its storage is far larger than the caches
  at 185 columns, as in a long run.
- **tick**: the sampler's own cost per tick (``stats().cost_mean_ns``: from the tick's start to
  the row pushed) at 1 kHz for ``--seconds``, with the default sources (about 25 columns) and
  with the default sources plus 8 GPUs of the fake NVML library (``tests/fake_nvml``, about 185
  columns), each in a fresh child process.

Target (issue 10): the 185-column tick costs at most 1.5x the 25-column tick.

Usage::

    python bench/bench_columns.py [--baseline main] [--rounds 5] [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_common import UNBUDGETED, cpu_model, log, median

REPO = Path(__file__).resolve().parent.parent
FAKE_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"
TARGET_RATIO = 1.5

PUSH_CPP = r"""
// push_bench COLUMNS ROWS: median ns per Ring::push over 9 batches of ROWS pushes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "stroboscope/ring.hpp"
int main(int argc, char** argv) {
  const std::size_t cols = std::strtoul(argv[1], nullptr, 10);
  const std::uint64_t rows = std::strtoull(argv[2], nullptr, 10);
  stroboscope::Ring ring(cols, 65536);
  std::vector<std::uint64_t> cells(cols, 42);
  std::vector<std::uint8_t> valid(cols, 1);
  for (std::size_t c = 0; c < cols; c += 3) valid[c] = 0;
  std::vector<double> per;
  for (int b = 0; b < 10; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t j = 0; j < rows; ++j) {
      cells[0] = j;
      ring.push(cells.data(), valid.data());
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (b > 0) per.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / rows);
  }
  std::sort(per.begin(), per.end());
  std::printf("%.2f\n", per[per.size() / 2]);
}
"""

TICK_CHILD = r"""
import json, sys, time
import stroboscope
gpus = sys.argv[1] == "gpu"
seconds = float(sys.argv[2])
UNBUDGETED = json.loads(sys.argv[3])  # bench_common.UNBUDGETED
s = stroboscope.Sampler(0.001, gpus=list(range(8)) if gpus else None, **UNBUDGETED)
s.start()
time.sleep(seconds)
s.stop()
st = s.stats()
print(json.dumps({"columns": st.num_columns + 1, "cost_mean_ns": st.cost_mean_ns,
                  "cost_p99_ns": st.cost_p99_ns, "ticks": st.ticks_taken}))
s.close()
"""


def fake_script(devices: int) -> str:
    lines = [f"devices {devices}", "driver 550.00.fake-bench"]
    for d in range(devices):
        lines += [f"set {d} util 42 43 44", f"set {d} power 250000 260000"]
    return "\n".join(lines) + "\n"


def build_push(workdir: Path, include: Path, ring_cpp: Path, name: str) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++") or "c++"
    src = workdir / "push_bench.cpp"
    src.write_text(PUSH_CPP)
    out = workdir / name
    cmd = [cxx, "-std=c++20", "-O3", "-DNDEBUG", "-I", str(include), str(src), str(ring_cpp)]
    subprocess.run([*cmd, "-o", str(out)], check=True)
    return out


def baseline_tree(workdir: Path, ref: str) -> tuple[Path, Path]:
    """``(include dir, ring.cpp)`` of git revision ``ref``, written under ``workdir``."""
    base = workdir / "baseline"
    (base / "stroboscope").mkdir(parents=True)
    for rel, dest in [
        ("cpp/include/stroboscope/ring.hpp", base / "stroboscope" / "ring.hpp"),
        ("cpp/src/ring.cpp", base / "ring.cpp"),
    ]:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:{rel}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dest.write_text(text)
    return base, base / "ring.cpp"


def run_tick(gpu: bool, seconds: float, library: Path, script: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("STROBOSCOPE_NVML_LIBRARY", None)
    env.pop("FAKE_NVML_SCRIPT", None)
    if gpu:
        env["STROBOSCOPE_NVML_LIBRARY"] = str(library)
        env["FAKE_NVML_SCRIPT"] = str(script)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            TICK_CHILD,
            "gpu" if gpu else "plain",
            str(seconds),
            json.dumps(UNBUDGETED),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline", help="git revision whose ring to time beside (e.g. main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rows", type=int, default=200_000, help="pushes per timed batch")
    ap.add_argument("--no-tick", action="store_true", help="only the push harness")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    results: dict[str, Any] = {"cpu": cpu_model(), "push": {}, "tick": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        variants = {
            "this tree": build_push(
                work, REPO / "cpp" / "include", REPO / "cpp" / "src" / "ring.cpp", "push_now"
            )
        }
        if args.baseline:
            inc, cpp = baseline_tree(work, args.baseline)
            variants[f"{args.baseline}"] = build_push(work, inc, cpp, "push_base")
        push: dict[str, dict[int, list[float]]] = {v: {25: [], 185: []} for v in variants}
        for r in range(args.rounds):
            log(f"push round {r + 1}/{args.rounds}")
            for name, exe in variants.items():
                for cols in (25, 185):
                    out = subprocess.run(
                        [str(exe), str(cols), str(args.rows)],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    push[name][cols].append(float(out.stdout))
        results["push"] = push
        print(f"CPU: {results['cpu']}")
        print("Ring::push, ns per row (median of rounds; ratio = median of per-round ratios)")
        for name, by in push.items():
            ratios = [b / a for a, b in zip(by[25], by[185])]
            print(
                f"  {name:>12}: 25 columns {median(by[25]):8.1f}  "
                f"185 columns {median(by[185]):8.1f}  185/25 {median(ratios):.2f}x"
            )
        if args.baseline:
            for cols in (25, 185):
                rat = [a / b for a, b in zip(push[args.baseline][cols], push["this tree"][cols])]
                print(f"  {cols} columns: {args.baseline} / this tree = {median(rat):.2f}x")

        if not args.no_tick:
            lib = work / "libfake_nvml.so"
            subprocess.run(
                ["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(FAKE_SOURCE)], check=True
            )
            script = work / "fake.txt"
            script.write_text(fake_script(8))
            ticks: dict[str, list[dict[str, Any]]] = {"plain": [], "gpu": []}
            for r in range(args.rounds):
                log(f"tick round {r + 1}/{args.rounds}")
                ticks["plain"].append(run_tick(False, args.seconds, lib, script))
                ticks["gpu"].append(run_tick(True, args.seconds, lib, script))
            results["tick"] = ticks
            plain = [t["cost_mean_ns"] for t in ticks["plain"]]
            gpu = [t["cost_mean_ns"] for t in ticks["gpu"]]
            ratio = median([g / p for p, g in zip(plain, gpu)])
            print("Sampler tick at 1 kHz, stats().cost_mean_ns (median of rounds)")
            print(
                f"  default sources, {ticks['plain'][0]['columns']} columns: "
                f"{median(plain):8.0f} ns"
            )
            print(f"  + 8 fake GPUs, {ticks['gpu'][0]['columns']} columns: {median(gpu):8.0f} ns")
            verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
            print(f"  ratio {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
