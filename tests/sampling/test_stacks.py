"""Python stacks read by the sampler (``Sampler(stacks=...)``): the truth program's CPU shares
against its own thread CPU clocks, in this process and in another; the arguments; stacks off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import stroboscope
from stroboscope.formats.stacks import FRAMES_SCHEMA, SAMPLES_SCHEMA, check_stacks
from stroboscope.sampling import _stacks

# The truth program: alpha spins, beta runs at a 50 % duty cycle, gamma sleeps, each on its own
# thread, each measuring its own thread CPU clock. Run here (threads of this process) and as a
# child process (the same text), so both ways of reading CPU time are checked.
TRUTH = """
import json, sys, threading, time

SECONDS = float(sys.argv[1]) if __name__ == "__main__" else 2.5
clocks = {}

def alpha():
    t0 = time.thread_time_ns()
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        pass
    clocks["alpha"] = time.thread_time_ns() - t0

def beta():
    t0 = time.thread_time_ns()
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        busy = time.monotonic() + 0.01
        while time.monotonic() < busy:
            pass
        time.sleep(0.01)
    clocks["beta"] = time.thread_time_ns() - t0

def gamma():
    t0 = time.thread_time_ns()
    time.sleep(SECONDS)
    clocks["gamma"] = time.thread_time_ns() - t0

def main():
    threads = [threading.Thread(target=f) for f in (alpha, beta, gamma)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clocks

if __name__ == "__main__":
    sys.stdin.readline()  # started once the sampler reads this process
    print(json.dumps(main()), flush=True)
"""

FEW_SOURCES = ["process"]


def _truth_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "truth"}
    exec(compile(TRUTH, "truth.py", "exec"), namespace)
    return namespace


def attributed(samples: pa.Table, frames: pa.Table, names: list[str]) -> dict[str, int]:
    """CPU ns of the samples whose stack holds each function (an independent reading of the
    tables, in Python)."""
    holds: dict[int, set[str]] = {}
    for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist()):
        holds.setdefault(sid, set()).add(fn)
    out = dict.fromkeys(names, 0)
    for sid, cpu in zip(samples["stack_id"].to_pylist(), samples["cpu_ns"].to_pylist()):
        for name in names:
            if cpu is not None and name in holds.get(sid, ()):
                out[name] += cpu
    return out


def shares(values: dict[str, int]) -> dict[str, float]:
    total = sum(values.values())
    assert total > 0, values
    return {k: 100.0 * v / total for k, v in values.items()}


def count_of(samples: pa.Table, frames: pa.Table, name: str) -> int:
    ids = {
        s
        for s, f in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist())
        if f == name
    }
    return sum(1 for s in samples["stack_id"].to_pylist() if s in ids)


@pytest.fixture
def truth_child() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", TRUTH, "2.5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for f in (child.stdin, child.stdout):
            if f is not None:
                f.close()


def test_truth_in_this_process() -> None:
    # Threads of this process: CPU from each thread's own CPU clock, exact at each read. The
    # shares agree with the program's own clocks within 2 points (the target).
    ns = _truth_namespace()
    with stroboscope.Sampler(0.001, sources=FEW_SOURCES, stacks=True) as sampler:
        time.sleep(0.05)
        clocks = ns["main"]()
    every, frames = sampler.stacks()  # stopped: every sample drained
    stats = sampler.stats().stacks
    assert every.schema == SAMPLES_SCHEMA and frames.schema == FRAMES_SCHEMA
    check_stacks(every, frames)  # the stored form's checks: one consistent set of stacks
    # The tree of this process is read: a Python child an earlier test left running here (a
    # multiprocessing resource tracker or forkserver) has samples too; the truth is ours.
    samples = every.filter(pc.equal(every["pid"], os.getpid()))
    names = ["alpha", "beta", "gamma"]
    cpu = attributed(samples, frames, names)
    got = shares(cpu)
    want = shares(clocks)
    for name in ("alpha", "beta"):
        assert abs(got[name] - want[name]) <= 2.0, (name, got, want)
        # And in ns: the thread's clock, less what ran before its first sample (its cpu_ns is
        # null) and at most a round's worth at its end.
        assert abs(cpu[name] - clocks[name]) <= 0.02 * clocks[name] + 20_000_000, (cpu, clocks)
    assert got["gamma"] <= 1.0, got
    assert count_of(samples, frames, "gamma") > 100  # present: in the wall weight
    # (A read may fail as a thread ends: its data stack is unmapped under the reader.)
    assert stats is not None
    assert stats.samples == every.num_rows + stats.dropped + stats.own_left_out
    assert samples.num_rows > 0.5 * every.num_rows
    truth_tids = {t for t, n in zip(samples["tid"].to_pylist(), samples["stack_id"].to_pylist())}
    assert len(truth_tids) >= 4  # main, alpha, beta, gamma (the drain thread, ours: left out)
    # Python 3.11 leaves OS thread names alone: each thread has the process's comm.
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    assert set(samples["thread"].to_pylist()) == {comm}


def test_truth_in_another_process(truth_child: subprocess.Popen[str]) -> None:
    # Another process: CPU from /proc/PID/task/TID/schedstat, which a running thread's kernel
    # brings up to date at each scheduler tick; the sums agree within 3 points (stated here;
    # bench/bench_stacks.py records the figure).
    assert truth_child.stdin is not None and truth_child.stdout is not None
    with stroboscope.Sampler(0.001, pid=truth_child.pid, sources=FEW_SOURCES, stacks=True) as s:
        deadline = time.monotonic() + 10
        while s.stats().stacks.processes == 0 and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.01)
        truth_child.stdin.write("\n")
        truth_child.stdin.flush()
        clocks = json.loads(truth_child.stdout.readline())
        samples, frames = s.stacks()
    check_stacks(samples, frames)
    assert set(samples["pid"].to_pylist()) == {truth_child.pid}
    names = ["alpha", "beta", "gamma"]
    got = shares(attributed(samples, frames, names))
    want = shares(clocks)
    for name in ("alpha", "beta"):
        assert abs(got[name] - want[name]) <= 3.0, (name, got, want)
    assert got["gamma"] <= 1.0, got
    assert count_of(samples, frames, "gamma") > 100
    with open(f"/proc/{truth_child.pid}/comm") as f:
        comm = f.read().strip()
    assert set(samples["thread"].to_pylist()) == {comm}
    assert len(set(samples["tid"].to_pylist())) == 4  # main, alpha, beta, gamma


def test_stack_rows_name_functions_root_first() -> None:
    def leaf_function() -> None:
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass

    def middle_function() -> None:
        leaf_function()

    with stroboscope.Sampler(0.001, sources=FEW_SOURCES, stacks=True) as s:
        t = threading.Thread(target=middle_function)
        t.start()
        t.join()
        samples, frames = s.stacks()
    rows = frames.to_pylist()
    stacks: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        stacks.setdefault(r["stack_id"], []).append(r)
    leafy = [
        sorted(v, key=lambda r: r["depth"])
        for v in stacks.values()
        if any(r["function"].endswith("leaf_function") for r in v)
    ]
    assert leafy, rows
    for st in leafy:
        names = [r["function"] for r in st]
        i = next(i for i, n in enumerate(names) if n.endswith("leaf_function"))
        assert names[i - 1].endswith("middle_function"), names
        assert names[0] == "Thread._bootstrap", names  # depth 0: the root
        leaf = st[i]
        assert leaf["file"] == __file__
        assert leaf["function"] == (
            "test_stack_rows_name_functions_root_first.<locals>.leaf_function"
        )
        assert leaf["line"] == leaf_function.__code__.co_firstlineno
    assert count_of(samples, frames, st[i]["function"]) > 50


@pytest.mark.parametrize(
    ("value", "kind", "words"),
    [
        ("yes", TypeError, "stacks must be False"),
        (0.0015, ValueError, "whole multiple of interval=0.001"),
        (0.0005, ValueError, "whole multiple"),
        (-1, ValueError, "got int -1"),
        (float("nan"), ValueError, "stacks must be"),
    ],
)
def test_bad_stacks_values_are_refused(value: object, kind: type[Exception], words: str) -> None:
    with pytest.raises(kind, match=words):
        stroboscope.Sampler(0.001, sources=FEW_SOURCES, stacks=value)  # type: ignore[arg-type]


def test_stacks_interval_defaults() -> None:
    assert _stacks.check_stacks(True, 0.001) == 0.001
    assert _stacks.check_stacks(True, 0.01) == 0.01
    assert _stacks.check_stacks(True, 0.0005) == pytest.approx(0.001)
    assert _stacks.check_stacks(True, 0.0003) == pytest.approx(0.0012)
    assert _stacks.check_stacks(0.004, 0.001) == pytest.approx(0.004)
    assert _stacks.check_stacks(False, 0.001) is None


def test_stacks_off_starts_nothing_and_says_so() -> None:
    before = set(os.listdir("/proc/self/task"))
    with stroboscope.Sampler(0.001, sources=FEW_SOURCES) as s:
        during = set(os.listdir("/proc/self/task"))
        assert s.stats().stacks is None
        with pytest.raises(ValueError, match="stacks=True"):
            s.stacks()
        names = {t.name for t in threading.enumerate()}
    assert "stroboscope-stacks-drain" not in names
    with stroboscope.Sampler(0.001, sources=FEW_SOURCES, stacks=True) as s:
        with_stacks = set(os.listdir("/proc/self/task"))
    # Stacks add two threads (the C++ reader and the drain); without them, none.
    assert len(with_stacks - before) == len(during - before) + 2


def _functions_sampled(samples: pa.Table, frames: pa.Table) -> set[str]:
    """Every function on a stack some sample names."""
    sampled = set(samples["stack_id"].to_pylist())
    return {
        fn
        for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist())
        if sid in sampled
    }


@pytest.mark.parametrize("include", [False, True])
def test_own_threads_left_out_of_this_process_stacks(include: bool) -> None:
    """Sampling its own process, the package's threads (its stacks drain thread, started at
    every Sampler(stacks=...)) take no samples unless ``include_own_threads=True``; the
    user's threads are sampled either way."""

    def user_spins() -> None:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            pass

    with stroboscope.Sampler(
        0.001, sources=FEW_SOURCES, stacks=True, include_own_threads=include
    ) as s:
        t = threading.Thread(target=user_spins)
        t.start()
        t.join()
        samples, frames = s.stacks()
    functions = _functions_sampled(samples, frames)
    assert any(fn.endswith("user_spins") for fn in functions), functions
    drain = "StackRecorder._drain_loop"
    assert (drain in functions) is include, functions


def test_the_reader_skips_the_threads_it_is_given() -> None:
    """``skip_thread``: the core's reader reads a thread of this process no more (the own
    threads the facade finds are handed to it); ``unskip_thread`` gives it back."""
    import stroboscope._core as core

    reader = core.StackSampler(0, False, 1_000_000, 1024)
    me = threading.get_native_id()

    def tids_of_one_round() -> set[int]:
        reader.sample_once()
        return {int(t) for t in reader.drain(0, 0)["tid"]}

    assert me in tids_of_one_round()
    assert reader.skip_thread(me)
    assert me not in tids_of_one_round()
    reader.unskip_thread(me)
    assert me in tids_of_one_round()
