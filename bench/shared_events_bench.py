"""What a scope costs when an outside recorder reads it (shared events), side by side in one run
with the in-process scope (a Sampler running in the process) and a ``perf_counter_ns()`` pair
(the floor); and edges per second from 4 processes writing at once, every edge read back.

Each figure is measured in a fresh interpreter (the events log of a process is shared or not
from its first edge on): ``floor``, ``in-process`` (no variable, a Sampler running),
``shared`` (``STROBOSCOPE_EVENTS_DIR`` set to a new directory under the temporary directory, no
Sampler), ``shared + edge rows`` (the same, with this process's Sampler asking for a row at
each begin through the directory's doorbell, ``ring_rows``) and, where the machine has one,
``shared, tmpfs`` (the directory on ``/dev/shm``). The scope with edge counters (each edge
followed by its thread's own CPU clock, and in ``rusage`` its ``getrusage(RUSAGE_THREAD)``)
beside the plain one: ``in-process, edge counters`` (``Sampler(edge_counters=True)``),
``in-process, edge counters rusage``, ``shared, edge counters`` (``STROBOSCOPE_EDGE_COUNTERS=cpu``).

Usage::

    python bench/shared_events_bench.py [--n 200000] [--repeats 7] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench_common import cpu_model

TMPFS = "/dev/shm"  # Linux's shared-memory filesystem, where there is one


def _child(mode: str, n: int, repeats: int) -> dict[str, float]:
    """Runs in the child: the median ns per iteration of the mode's loop, minus an empty loop."""
    import stroboscope

    def per_call(body: Any) -> float:
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            body(n)
            runs.append((time.perf_counter_ns() - t0) / n)
        return statistics.median(runs)

    def empty(n: int) -> None:
        for _ in range(n):
            pass

    def floor(n: int) -> None:
        clock = time.perf_counter_ns
        for _ in range(n):
            clock()
            clock()

    kept = stroboscope.annotate("kept")

    def scoped(n: int) -> None:
        for _ in range(n):
            with kept:
                pass

    loop = per_call(empty)
    if mode == "floor":
        return {"ns": per_call(floor) - loop}
    if mode.startswith("in-process"):
        options: dict[str, Any] = {}  # none for the plain scope (a build without the option)
        if mode.endswith("edge counters"):
            options["edge_counters"] = "cpu"
        elif mode.endswith("edge counters rusage"):
            options["edge_counters"] = "rusage"
        with stroboscope.Sampler(0.001, sources=["memory"], capacity=1 << 12, **options):
            return {"ns": per_call(scoped) - loop}
    return {"ns": per_call(scoped) - loop}  # shared: the variable is set, no Sampler


def _run_child(mode: str, n: int, repeats: int, events_dir: str | None) -> float:
    if mode == "shared + edge rows":
        from stroboscope import Sampler
        from stroboscope.sampling._scope_log import ring_rows

        with Sampler(0.001, sources=["memory"], capacity=1 << 12) as s:
            bell = ring_rows(events_dir or "", s)
            try:
                return _run_child("shared", n, repeats, events_dir)
            finally:
                bell.close()
    env = dict(os.environ)
    env.pop("STROBOSCOPE_EVENTS_DIR", None)
    env.pop("STROBOSCOPE_EDGE_COUNTERS", None)
    if events_dir is not None:
        env["STROBOSCOPE_EVENTS_DIR"] = events_dir
    if mode == "shared, edge counters":
        env["STROBOSCOPE_EDGE_COUNTERS"] = "cpu"
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--n", str(n), "--repeats", str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ns"])


def _writers(processes: int, scopes: int, events_dir: str) -> tuple[float, int, int, int]:
    """``processes`` processes each writing ``scopes`` scopes at once: edges per second of wall
    time, edges read back, edges expected, edges counted lost."""
    from stroboscope.formats.shared_events import read_events_dir

    code = (
        "import stroboscope\n"
        "s = stroboscope.annotate('edge')\n"
        f"for _ in range({scopes}):\n"
        "    with s:\n"
        "        pass\n"
    )
    env = {**os.environ, "STROBOSCOPE_EVENTS_DIR": events_dir}
    # Started first, then timed from the first edge to the last (the interpreters' start is no
    # part of the rate).
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(processes)]
    for p in procs:
        p.wait()
    table = read_events_dir(events_dir)
    mono = table.column("mono_ns").to_numpy()
    span = (int(mono.max()) - int(mono.min())) / 1e9 if len(mono) else 0.0
    lost = int(table.schema.metadata[b"events_lost"])
    return table.num_rows / span if span else 0.0, table.num_rows, 2 * processes * scopes, lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the modes")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.n, args.repeats)))
        return

    tmpfs = TMPFS if os.path.isdir(TMPFS) else None
    dirs = {
        "shared": None,
        "shared + edge rows": None,
        "shared, tmpfs": tmpfs,
        "shared, edge counters": None,
    }
    modes = ["floor", "in-process", "in-process, edge counters"]
    modes += ["in-process, edge counters rusage", "shared", "shared, edge counters"]
    modes += ["shared + edge rows"]
    modes += ["shared, tmpfs"] if tmpfs else []
    results: dict[str, list[float]] = {m: [] for m in modes}
    made = []
    try:
        for _ in range(args.rounds):  # alternated, so a burst of load hits every mode alike
            for mode in modes:
                d = None
                if mode.startswith("shared"):
                    d = tempfile.mkdtemp(prefix="stroboscope-events-", dir=dirs[mode])
                    made.append(d)
                results[mode].append(_run_child(mode, args.n, args.repeats, d))
        rate_dir = tempfile.mkdtemp(prefix="stroboscope-events-")
        made.append(rate_dir)
        rate, read, expected, lost = _writers(4, 100_000, rate_dir)
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)

    med = {m: statistics.median(v) for m, v in results.items()}
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} CPUs; n={args.n} x {args.repeats}, "
        f"{args.rounds} rounds (median of the rounds' medians)"
    )
    print("| scope enter + exit | ns | x in-process | rounds |")
    print("| --- | --- | --- | --- |")
    for m in modes:
        label = "perf_counter_ns() pair (floor)" if m == "floor" else m
        spread = ", ".join(f"{v:,.0f}" for v in results[m])
        print(f"| {label} | {med[m]:,.0f} | {med[m] / med['in-process']:.2f}x | {spread} |")
    print(
        f"4 processes at once: {rate:,.0f} edges/s (first edge to last), "
        f"{read:,} of {expected:,} edges read back, {lost} counted lost"
    )


if __name__ == "__main__":
    main()
