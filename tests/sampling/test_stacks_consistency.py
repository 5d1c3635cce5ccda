"""Stacks the program can have: every frame under a parent that calls it, with recursion 500
deep, generators, asyncio tasks and 64 threads starting and ending; a forked worker's stacks;
a target killed at random moments never crashes either process."""

from __future__ import annotations

import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
import stroboscope
from stroboscope.formats.stacks import check_stacks

# Functions of the program below and the functions that call them (None: a frame of the
# standard library or of the program's top, checked only where it sits under ours).
PROGRAM = """
import asyncio, sys, threading, time

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

def recurse(n):
    if n == 0:
        spin(0.002)
        return
    recurse(n - 1)

def deep():
    for _ in range(150):
        recurse(500)

def produce():
    for i in range(300):
        spin(0.001)
        yield i

def consume():
    for _ in produce():
        pass

async def co_inner():
    spin(0.002)
    await asyncio.sleep(0)

async def co_outer():
    for _ in range(100):
        await co_inner()

async def both():
    await asyncio.gather(co_outer(), co_outer())

def run_async():
    asyncio.run(both())

def short_lived():
    spin(0.005)

def churn():
    for _ in range(8):
        ts = [threading.Thread(target=short_lived) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

def main():
    ts = [threading.Thread(target=f) for f in (deep, consume, run_async, churn)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.stdin.readline()
    main()
"""

CALLERS: dict[str, set[str]] = {
    "spin": {"recurse", "produce", "co_inner", "short_lived"},
    "recurse": {"recurse", "deep"},
    "produce": {"consume"},
    "co_inner": {"co_outer"},
    "co_outer": {"Handle._run"},  # a task's step: the event loop calls it
    "short_lived": {"Thread.run"},
    "deep": {"Thread.run"},
    "consume": {"Thread.run"},
    "churn": {"Thread.run"},
    "run_async": {"Thread.run"},
}


def impossible(frames: pa.Table) -> set[int]:
    """The stacks with a frame of ours under a parent that never calls it."""
    stacks: dict[int, list[tuple[int, str]]] = {}
    for r in frames.to_pylist():
        stacks.setdefault(r["stack_id"], []).append((r["depth"], r["function"]))
    bad = set()
    for sid, rows in stacks.items():
        names = [n for _, n in sorted(rows)]
        for i, name in enumerate(names):
            if name in CALLERS and (i == 0 or names[i - 1] not in CALLERS[name]):
                bad.add(sid)
    return bad


def test_frames_sit_under_their_callers() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, "wait"], stdin=subprocess.PIPE, text=True
    )
    try:
        with stroboscope.Sampler(0.001, pid=child.pid, sources=["process"], stacks=True) as s:
            deadline = time.monotonic() + 10
            while s.stats().stacks.processes == 0 and time.monotonic() < deadline:  # type: ignore[union-attr]
                time.sleep(0.01)
            assert child.stdin is not None
            child.stdin.write("\n")
            child.stdin.close()
            assert child.wait(120) == 0
            samples, frames = s.stacks()
            stats = s.stats().stacks
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    check_stacks(samples, frames)
    bad = impossible(frames)
    n_bad = sum(1 for sid in samples["stack_id"].to_pylist() if sid in bad)
    assert n_bad <= 0.01 * samples.num_rows, (n_bad, samples.num_rows)
    by_stack: dict[int, list[str]] = {}
    for r in frames.to_pylist():
        by_stack.setdefault(r["stack_id"], []).append(r["function"])
    seen = {n for names in by_stack.values() for n in names}
    # Each kind of code was seen: the recursion whole (500 recurse frames under deep), the
    # generator under its consumer, the coroutines, the short-lived threads.
    assert {"produce", "consume", "co_inner", "co_outer", "short_lived", "recurse"} <= seen
    assert max(names.count("recurse") for names in by_stack.values()) == 501
    assert stats is not None and stats.truncated == 0
    assert stats.extra_frame_reads > 0  # generator and coroutine frames live outside the stack


def test_a_forked_worker_is_read_too() -> None:
    program = """
import os, sys, time
def worker_spin():
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        pass
def parent_wait(pid):
    os.waitpid(pid, 0)
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    worker_spin()
    os._exit(0)
parent_wait(pid)
print(pid, flush=True)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        with stroboscope.Sampler(0.001, pid=child.pid, sources=["process"], stacks=True) as s:
            deadline = time.monotonic() + 10
            while s.stats().stacks.processes == 0 and time.monotonic() < deadline:  # type: ignore[union-attr]
                time.sleep(0.01)
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("\n")
            child.stdin.flush()
            worker = int(child.stdout.readline())
        samples, frames = s.stacks()
        ticks = s.stats().stacks.ticks  # type: ignore[union-attr]
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for f in (child.stdin, child.stdout):
            if f is not None:
                f.close()
    holds: dict[int, set[str]] = {}
    for r in frames.to_pylist():
        holds.setdefault(r["stack_id"], set()).add(r["function"])
    by_pid: dict[int, set[str]] = {}
    for pid, sid in zip(samples["pid"].to_pylist(), samples["stack_id"].to_pylist()):
        by_pid.setdefault(pid, set()).update(holds[sid])
    assert set(by_pid) == {child.pid, worker}
    assert "worker_spin" in by_pid[worker] and "parent_wait" not in by_pid[worker]
    assert "parent_wait" in by_pid[child.pid] and "worker_spin" not in by_pid[child.pid]
    n_worker = sum(1 for p in samples["pid"].to_pylist() if p == worker)
    assert n_worker > 300  # 1.5 s at 1 kHz, generous for a loaded machine
    assert n_worker <= ticks  # read once a round: never followed twice


def test_killing_the_target_at_random_moments() -> None:
    # SIGKILL at a random moment of the program (starting up, recursing, churning threads):
    # whatever was read is one consistent set, the reader says the process exited and goes on.
    rng = random.Random(31)
    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", PROGRAM])
        with stroboscope.Sampler(0.001, pid=child.pid, sources=["process"], stacks=True) as s:
            time.sleep(rng.uniform(0.05, 0.6))
            child.send_signal(signal.SIGKILL)
            assert child.wait() == -signal.SIGKILL
            ticks = s.stats().stacks.ticks  # type: ignore[union-attr]
            time.sleep(0.6)  # past the next rescan of the tree
            stats = s.stats().stacks
            samples, frames = s.stacks()
        assert stats is not None
        assert stats.ticks > ticks  # the reader went on
        assert stats.processes == 0  # it knows the process is gone
        # Listed as not read only when it exited before a stack of it was read.
        assert ((child.pid, "exited") in stats.skipped) == (samples.num_rows == 0), stats
        check_stacks(samples, frames)


def _candidates(minor: int) -> list[str]:
    """``python3.MINOR`` on PATH, and in pyenv's versions when pyenv is installed."""
    names = [n for n in [shutil.which(f"python3.{minor}")] if n is not None]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        try:
            root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return names
        names += sorted(
            glob.glob(
                os.path.join(
                    root.stdout.strip(), "versions", f"3.{minor}.*", "bin", f"python3.{minor}"
                )
            )
        )
    return names


def _other_pythons() -> list[tuple[str, tuple[int, int]]]:
    """Interpreters other than this one's minor version: (executable, version), one a minor."""
    found = []
    for minor in (9, 10, 11, 12, 13):
        if minor == sys.version_info.minor:
            continue  # the build's own: read, not skipped
        for name in _candidates(minor):
            try:
                out = subprocess.run(
                    [name, "-c", "import sys; print(sys.executable)"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0 and out.stdout.strip():
                found.append((out.stdout.strip(), (3, minor)))
                break
    return found


@pytest.mark.parametrize("python", _other_pythons(), ids=lambda p: f"{p[1][0]}.{p[1][1]}")
def test_another_python_version_is_skipped_with_its_reason(
    python: tuple[str, tuple[int, int]],
) -> None:
    # A process running another CPython than the build's: never read (its layout differs),
    # listed with the reason, and the sampler goes on.
    exe, (major, minor) = python
    child = subprocess.Popen([exe, "-c", "import time; time.sleep(1.5)"])
    try:
        with stroboscope.Sampler(0.001, pid=child.pid, sources=["process"], stacks=True) as s:
            deadline = time.monotonic() + 10
            while not s.stats().stacks.skipped and time.monotonic() < deadline:  # type: ignore[union-attr]
                time.sleep(0.01)
            stats = s.stats().stacks
            samples, _ = s.stacks()
    finally:
        child.kill()
        child.wait()
    assert stats is not None and samples.num_rows == 0 and stats.processes == 0
    ((pid, why),) = stats.skipped
    assert pid == child.pid
    if minor < 11:
        assert why.startswith("CPython older than 3.11 (no Py_Version in "), why
    else:
        built = f"{sys.version_info.major}.{sys.version_info.minor}"
        assert why == f"CPython {major}.{minor} in the process; stacks are built for {built}"
