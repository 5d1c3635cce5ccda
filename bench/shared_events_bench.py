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

Each scope figure is wall time and the child's own CPU time (``time.thread_time_ns()``) per
enter + exit, minus an empty loop: on a shared, loaded machine the CPU time is the steadier one.
``--trees A B`` runs every mode once per tree (each a directory whose ``stroboscope`` package
carries its built extension, e.g. a copy from before a change), alternated in the same run; the
recorder of ``shared + edge rows`` runs in a process of its own on the same tree.

The 4 writers import, make their scope and wait for the same signal, so the rate is 4
processes writing at once (not their interpreters' start, one after another), timed from the
first edge to the last; their CPU time per edge is the writers' own (each loop's
``time.thread_time_ns()``); "read back once" is every writer's edges there exactly once (a
negative count read back says otherwise).

Usage::

    python bench/shared_events_bench.py [--n 200000] [--repeats 7] [--rounds 3] [--trees A B]
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

import numpy as np
from bench_common import cpu_model

TMPFS = "/dev/shm"  # Linux's shared-memory filesystem, where there is one


def _child(mode: str, n: int, repeats: int) -> dict[str, float]:
    """Runs in the child: the median ns per iteration of the mode's loop (wall and this thread's
    CPU), minus an empty loop."""
    import stroboscope

    def per_call(body: Any) -> tuple[float, float]:
        walls, cpus = [], []
        for _ in range(repeats):
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            body(n)
            walls.append((time.perf_counter_ns() - t0) / n)
            cpus.append((time.thread_time_ns() - c0) / n)
        return statistics.median(walls), statistics.median(cpus)

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

    loop_wall, loop_cpu = per_call(empty)

    def net(body: Any) -> dict[str, float]:
        wall, cpu = per_call(body)
        return {"ns": wall - loop_wall, "cpu_ns": cpu - loop_cpu}

    if mode == "floor":
        return net(floor)
    if mode.startswith("in-process"):
        options: dict[str, Any] = {}  # none for the plain scope (a build without the option)
        if mode.endswith("edge counters"):
            options["edge_counters"] = "cpu"
        elif mode.endswith("edge counters rusage"):
            options["edge_counters"] = "rusage"
        with stroboscope.Sampler(0.001, sources=["memory"], capacity=1 << 12, **options):
            return net(scoped)
    return net(scoped)  # shared: the variable is set, no Sampler


def _recorder(events_dir: str) -> None:
    """Runs in the recorder's process of ``shared + edge rows``: a Sampler at 1 kHz that takes a
    row at each begin of the command through the directory's doorbell, until stdin closes."""
    from stroboscope import Sampler
    from stroboscope.sampling._scope_log import ring_rows

    with Sampler(0.001, sources=["memory"], capacity=1 << 12) as s:
        bell = ring_rows(events_dir, s)
        try:
            print("ready", flush=True)
            sys.stdin.read()
        finally:
            bell.close()


def _env(tree: str | None, events_dir: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("STROBOSCOPE_EVENTS_DIR", None)
    env.pop("STROBOSCOPE_EDGE_COUNTERS", None)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, os.path.dirname(os.path.abspath(__file__))])
    if events_dir is not None:
        env["STROBOSCOPE_EVENTS_DIR"] = events_dir
    return env


def _run_child(
    mode: str, n: int, repeats: int, events_dir: str | None, tree: str | None
) -> tuple[float, float]:
    if mode == "shared + edge rows":
        rec = subprocess.Popen(
            [sys.executable, __file__, "--recorder", events_dir or ""],
            env=_env(tree),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert rec.stdin is not None and rec.stdout is not None
        try:
            if rec.stdout.readline().strip() != "ready":
                raise RuntimeError("the recorder did not start")
            return _run_child("shared", n, repeats, events_dir, tree)
        finally:
            rec.stdin.close()
            rec.wait()
    env = _env(tree, events_dir)
    if mode == "shared, edge counters":
        env["STROBOSCOPE_EDGE_COUNTERS"] = "cpu"
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--n", str(n), "--repeats", str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float(got["ns"]), float(got["cpu_ns"])


def _writers(
    processes: int, scopes: int, events_dir: str, tree: str | None
) -> tuple[float, int, int, int, float]:
    """``processes`` processes each writing ``scopes`` scopes at once: edges per second of wall
    time, edges read back, edges expected, edges counted lost, CPU ns per edge."""
    from stroboscope.formats.shared_events import read_events_dir

    code = (
        "import sys, time, stroboscope\n"
        "s = stroboscope.annotate('edge')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read(1)\n"
        "c0 = time.thread_time_ns()\n"
        f"for _ in range({scopes}):\n"
        "    with s:\n"
        "        pass\n"
        "print(time.thread_time_ns() - c0, flush=True)\n"
    )
    env = _env(tree, events_dir)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for p in procs:  # all imported and waiting: then all go at once
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a writer did not start")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("g")
        p.stdin.close()
    cpu_ns = 0
    for p in procs:
        assert p.stdout is not None
        cpu_ns += int(p.stdout.read().strip())  # the writer's own loop, its thread's CPU
        p.wait()
    table = read_events_dir(events_dir)
    mono = table.column("mono_ns").to_numpy()
    span = (int(mono.max()) - int(mono.min())) / 1e9 if len(mono) else 0.0
    lost = int(table.schema.metadata[b"events_lost"])
    rate = table.num_rows / span if span else 0.0
    expected = 2 * processes * scopes
    # Each read back once: every writer's edges are there, no more, no fewer.
    per_pid = np.unique(table.column("pid").to_numpy(), return_counts=True)[1]
    once = len(per_pid) == processes and bool((per_pid == 2 * scopes).all())
    read = table.num_rows if once else -table.num_rows
    return rate, read, expected, lost, cpu_ns / expected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the modes")
    parser.add_argument(
        "--trees", nargs="+", default=None, help="package trees to compare (PYTHONPATH each)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--recorder", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.n, args.repeats)))
        return
    if args.recorder is not None:
        _recorder(args.recorder)
        return

    trees: list[str | None] = list(args.trees) if args.trees else [None]
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
    keys = [(t, m) for m in modes for t in trees]
    results: dict[tuple[str | None, str], list[tuple[float, float]]] = {k: [] for k in keys}
    rates: dict[str | None, list[tuple[float, int, int, int, float]]] = {t: [] for t in trees}
    made = []
    load = os.getloadavg()
    try:
        for _ in range(args.rounds):  # alternated, so a burst of load hits every mode alike
            for tree, mode in keys:
                d = None
                if mode.startswith("shared"):
                    d = tempfile.mkdtemp(prefix="stroboscope-events-", dir=dirs[mode])
                    made.append(d)
                results[(tree, mode)].append(_run_child(mode, args.n, args.repeats, d, tree))
            for tree in trees:
                rate_dir = tempfile.mkdtemp(prefix="stroboscope-events-")
                made.append(rate_dir)
                rates[tree].append(_writers(4, 100_000, rate_dir, tree))
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
    load_after = os.getloadavg()

    print(
        f"machine: {cpu_model()}, {os.cpu_count()} CPUs; load average {load[0]:.1f} before, "
        f"{load_after[0]:.1f} after; n={args.n} x {args.repeats}, {args.rounds} rounds "
        "(median of the rounds' medians)"
    )
    print(
        "| scope enter + exit | tree | wall ns | CPU ns | x in-process (CPU) | rounds (wall/CPU) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in modes:
        for tree in trees:
            got = results[(tree, mode)]
            wall = statistics.median(w for w, _ in got)
            cpu = statistics.median(c for _, c in got)
            base = statistics.median(c for _, c in results[(tree, "in-process")])
            label = "perf_counter_ns() pair (floor)" if mode == "floor" else mode
            spread = ", ".join(f"{w:,.0f}/{c:,.0f}" for w, c in got)
            name = os.path.basename(os.path.normpath(tree)) if tree else "-"
            print(f"| {label} | {name} | {wall:,.0f} | {cpu:,.0f} | {cpu / base:.2f}x | {spread} |")
    for tree in trees:
        name = os.path.basename(os.path.normpath(tree)) if tree else "-"
        for rate, read, expected, lost, cpu in rates[tree]:
            print(
                f"4 processes at once ({name}): {rate:,.0f} edges/s (first edge to last), "
                f"{read:,} of {expected:,} edges read back, {lost} counted lost, "
                f"{cpu:,.0f} ns of the writers' CPU per edge"
            )


if __name__ == "__main__":
    main()
