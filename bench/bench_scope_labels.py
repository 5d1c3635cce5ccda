"""What a labelled scope costs beside an unlabelled one, while a Sampler records: ``with
annotate("step")`` against ``with annotate("step", step=step)`` (a label that changes on every
call: a new label set each time) and ``step=3`` (the same label set each time), each scope made
in the loop as user code makes it.

Usage::

    python bench/bench_scope_labels.py [--n 50000] [--repeats 7] [--rounds 3] [--before DIR]

``--before DIR``: also time, in a child process per round, the package found in DIR (a copy of
``python/`` from before a change, with the built extension copied beside its ``_core`` stub),
alternating with this tree's, so both are measured under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable

_CHILD = """
import json, sys, time, statistics
if {before!r}:
    sys.path.insert(0, {before!r})
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
import stroboscope
from stroboscope.recording.sampler import Sampler
annotate = stroboscope.annotate

def plain(n):
    for i in range(n):
        with annotate("step"):
            pass

def changing(n):
    for i in range(n):
        with annotate("step", step=i):
            pass

def same(n):
    for i in range(n):
        with annotate("step", step=3):
            pass

def empty(n):
    for i in range(n):
        pass

def per(f, n, r):
    out = []
    for _ in range(r):
        t = time.perf_counter_ns()
        f(n)
        out.append((time.perf_counter_ns() - t) / n)
    return statistics.median(out)

n, r = {n}, {repeats}
with Sampler(0.001, sources=["memory"], capacity=1 << 12):
    e = per(empty, n, r)
    got = dict(plain=per(plain, n, r) - e, changing=per(changing, n, r) - e)
    got["same"] = per(same, n, r) - e
print(json.dumps(dict(got, where=stroboscope.__file__)))
"""


def _round(before: str, n: int, repeats: int) -> dict[str, float]:
    code = _CHILD.format(before=before, n=n, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default="")
    args = parser.parse_args()
    trees = [("before", os.path.abspath(args.before))] if args.before else []
    trees.append(("this tree", ""))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, path in trees:
            runs[name].append(_round(path, args.n, args.repeats))
    with open("/proc/cpuinfo") as info:
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if "model name" in ln), "?")
    load = os.getloadavg()[0]
    print(
        f"CPU: {cpu}; {os.cpu_count()} CPUs; load {load:.1f}; n={args.n}, median of "
        f"{args.repeats}, {args.rounds} rounds (median of rounds)\n"
    )
    print("| tree | unlabelled ns | step=step ns (x) | step=3 ns (x) |\n| --- | --- | --- | --- |")
    med: Callable[[str, str], float] = lambda t, k: statistics.median(r[k] for r in runs[t])  # noqa: E731
    for name, _ in trees:
        p, c, s = med(name, "plain"), med(name, "changing"), med(name, "same")
        print(f"| {name} | {p:,.0f} | {c:,.0f} ({c / p:.2f}x) | {s:,.0f} ({s / p:.2f}x) |")


if __name__ == "__main__":
    main()
