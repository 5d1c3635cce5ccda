"""NVTX capture: the cost of an NVTX range push + pop from Python (the ``nvtx`` package, through
NVTX's C API) with stroboscope's injection library attached, beside NVTX with no tool (what every
annotated program pays when nothing records: Nsight-style no-op NVTX), NVTX with the library found
but declining (no events directory: NVTX's own no-op functions), and a ``time.perf_counter_ns()``
pair (the cheapest timing a pure-Python scope can do).

NVTX attaches a tool once per process, so each variant runs in its own interpreter; the variants
are interleaved round by round so drift hits them alike. ``attached - declined`` is what the
library's callbacks add (two edges into the shared events file), the rest is the ``nvtx``
package and NVTX's dispatch.

The same from C (``bench/nvtx_calls.cpp``, compiled here with the system C++ compiler): the
library's functions called through NVTX's slots, as a CUDA program's or torch's NVTX calls reach
them, beside a ``clock_gettime`` pair and an empty call through a pointer.

Runs standalone: ``python bench/nvtx_bench.py [--pairs N] [--rounds R]``. Needs the ``nvtx``
package and the built library beside ``stroboscope._core``. Prints medians over the rounds and
the CPU model; nothing is written but temporary files, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from bench_common import BENCH_DIR, REPO_DIR, cpu_model
from stroboscope.formats.shared_events import EVENTS_DIR_ENV, NVTX_INJECTION_ENV
from stroboscope.scopes import nvtx_injection_path

CHILD = """
    import json, sys, time
    import nvtx

    def timed(body, n):
        t0 = time.perf_counter_ns()
        body(n)
        return (time.perf_counter_ns() - t0) / n

    def empty(n):
        for _ in range(n):
            pass

    def clock_pair(n):
        p = time.perf_counter_ns
        for _ in range(n):
            p()
            p()

    def push_pop(n):
        push, pop = nvtx.push_range, nvtx.pop_range
        for _ in range(n):
            push("step")
            pop()

    def push_pop_domain(n):
        push, pop = nvtx.push_range, nvtx.pop_range
        for _ in range(n):
            push("step", domain="train")
            pop(domain="train")

    n = int(sys.argv[1])
    push_pop(1000)  # NVTX initialises (and loads a tool) on the first call: not timed
    push_pop_domain(1000)
    print(json.dumps({
        "empty": timed(empty, n),
        "clock": timed(clock_pair, n),
        "push_pop": timed(push_pop, n),
        "push_pop_domain": timed(push_pop_domain, n),
    }))
"""

VARIANTS = ("no tool", "declined", "attached")


def run_child(variant: str, library: str, events_dir: str, pairs: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in (EVENTS_DIR_ENV, NVTX_INJECTION_ENV)}
    if variant != "no tool":
        env[NVTX_INJECTION_ENV] = library
    if variant == "attached":
        env[EVENTS_DIR_ENV] = events_dir
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(pairs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def c_calls(library: str, events_dir: str, rounds: int) -> dict[str, float] | str:
    """The C-level costs (ns per call pair) from bench/nvtx_calls.cpp, or why there are none."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        return "no C++ compiler"
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "nvtx_calls"
        build = subprocess.run(
            [
                cxx,
                "-O2",
                "-std=c++20",
                "-I",
                str(REPO_DIR / "cpp" / "include"),
                "-o",
                str(exe),
                str(BENCH_DIR / "nvtx_calls.cpp"),
                "-ldl",
            ],
            capture_output=True,
            text=True,
        )
        if build.returncode != 0:
            return f"nvtx_calls.cpp did not build: {build.stderr.strip()[:300]}"
        env = {**os.environ, EVENTS_DIR_ENV: events_dir}
        done = subprocess.run(
            [str(exe), library, "--rounds", str(rounds)], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            return f"nvtx_calls failed: {done.stderr.strip()[:300]}"
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    library = nvtx_injection_path()
    if library is None:
        sys.exit("the NVTX injection library is not built beside stroboscope._core")
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as events_dir:
        for _ in range(args.rounds):
            for variant in VARIANTS:
                runs[variant].append(run_child(variant, library, events_dir, args.pairs))
        files = sorted(os.listdir(events_dir))
        native = c_calls(library, events_dir, args.rounds)

    def med(variant: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[variant])

    loop = statistics.median(r["empty"] for rs in runs.values() for r in rs)
    clock = statistics.median(r["clock"] for rs in runs.values() for r in rs) - loop
    print(f"CPU: {cpu_model()}  cores: {os.cpu_count()}  Python {platform.python_version()}")
    print(
        f"{args.rounds} rounds x {args.pairs:,} pairs per variant; medians, loop overhead "
        f"({loop:.1f} ns) subtracted; {len(files)} events files written by 'attached'"
    )
    print(f"{'perf_counter_ns() pair':44s} {clock:8.1f} ns")
    for key, label in (
        ("push_pop", "nvtx push_range + pop_range"),
        ("push_pop_domain", "nvtx push_range + pop_range, domain='train'"),
    ):
        for variant in VARIANTS:
            print(f"{label + ', ' + variant:58s} {med(variant, key) - loop:8.1f} ns")
        added = med("attached", key) - med("declined", key)
        print(f"{'  the library callbacks (attached - declined)':58s} {added:8.1f} ns")
    print("from C, the library attached (bench/nvtx_calls.cpp):")
    if isinstance(native, str):
        print(f"  not measured: {native}")
        return
    for key, label in (
        ("clock_pair", "clock_gettime(CLOCK_MONOTONIC) pair"),
        ("empty_call", "an empty call through a pointer (NVTX's no-op)"),
        ("push_pop", "nvtxRangePushA + nvtxRangePop"),
        ("push_pop_domain", "nvtxDomainRangePushEx + nvtxDomainRangePop"),
        ("start_end", "nvtxRangeStartA + nvtxRangeEnd"),
        ("mark", "nvtxMarkA"),
    ):
        print(f"  {label:56s} {native[key]:8.1f} ns")


if __name__ == "__main__":
    main()
