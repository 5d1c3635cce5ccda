"""Scopes in a process started with ``STROBOSCOPE_EVENTS_DIR`` (by a recorder outside it): they
write with no Sampler in the process, from every thread and from every process it starts (fork,
multiprocessing's fork and spawn, a subprocess), and a SIGKILL loses no edge already written."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
from _shared_events import start
from stroboscope.analysis.scope_edges import shared_intervals
from stroboscope.formats.shared_events import read_events_dir

COMMAND = """
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time

import stroboscope


def say(*words):
    print(*words, flush=True)


def scoped(name):
    with stroboscope.annotate(name, worker=os.getpid()):
        pass
    say("pid", name, os.getpid())


if __name__ == "__main__":
    with stroboscope.labels(run="a"):
        for step in range(20):
            with stroboscope.annotate("outer", step=step):
                with stroboscope.annotate("inner"):
                    with stroboscope.annotate("leaf"):
                        pass

    native = []

    def work(i):
        with stroboscope.annotate("thread", i=i):
            time.sleep(0.001)
        native.append(threading.get_native_id())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, tid in enumerate(native):  # printed from one thread: lines never interleave
        say("tid", i, tid)
    child = os.fork()
    if child == 0:
        scoped("forked")
        os._exit(0)
    os.waitpid(child, 0)
    for method in ("fork", "spawn"):
        p = mp.get_context(method).Process(target=scoped, args=("mp-" + method,))
        p.start()
        p.join()
    code = (
        "import os, stroboscope\\n"
        "with stroboscope.annotate('sub'): pass\\n"
        "print('pid sub', os.getpid())"
    )
    sub = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print(sub.stdout, end="", flush=True)
    held = stroboscope.annotate("held")
    held.__enter__()
    say("ready", os.getpid(), time.monotonic_ns())
    time.sleep(600)
"""


def test_a_killed_command_and_its_workers_lose_no_edge(tmp_path: Path) -> None:
    events_dir = tmp_path / "events"
    events_dir.mkdir()
    t0 = time.monotonic_ns()
    proc = start(COMMAND, events_dir, tmp_path / "command.py", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(repr(line))
        if line.split():
            lines.append(line.split())
        if lines and lines[-1][0] == "ready":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    t1 = time.monotonic_ns()
    pids = {words[1]: int(words[2]) for words in lines if words[0] == "pid"}
    tids = {int(words[2]) for words in lines if words[0] == "tid"}
    ready_ns = int(lines[-1][2])
    assert sorted(pids) == ["forked", "mp-fork", "mp-spawn", "sub"]

    events = read_events_dir(events_dir)
    ev = events.to_pydict()
    assert events.schema.metadata[b"events_lost"] == b"0"
    assert events.schema.metadata[b"events_damaged"] == b"0"
    mono = np.asarray(ev["mono_ns"])
    assert t0 < mono.min() and mono.max() < ready_ns < t1  # the clock of time.monotonic_ns()
    main = np.asarray(ev["pid"]) == proc.pid
    # The command: 20 x 3 nested scopes, 3 threads, and the scope still open at the kill.
    scopes = np.asarray(ev["scope"], dtype=object)
    for name in ("outer", "inner", "leaf"):
        assert (main & (scopes == name)).sum() == 40
    assert (scopes == "thread").sum() == 6
    assert set(np.asarray(ev["thread_id"])[scopes == "thread"].tolist()) == tids
    assert (scopes == "held").sum() == 1
    # Each worker: its own pid, one scope.
    for name, pid in pids.items():
        mine = np.asarray(ev["pid"]) == pid
        assert (scopes[mine] == name).sum() == 2, name
        assert set(np.asarray(ev["thread_id"])[mine].tolist()) == {pid}

    iv = shared_intervals(events_dir)
    rows = iv.to_pylist()
    leafs = [r for r in rows if r["name"] == "leaf"]
    assert len(leafs) == 20
    assert {r["path"] for r in leafs} == {"outer/inner/leaf"}
    assert {r["depth"] for r in leafs} == {2}
    assert {r["run"] for r in leafs} == {"a"}
    assert sorted(int(r["step"]) for r in rows if r["name"] == "outer") == list(range(20))
    assert all(r["pid"] == proc.pid and r["producer"] == "py" for r in leafs)
    (held,) = [r for r in rows if r["name"] == "held"]
    assert held["end_ns"] is None  # open when the command was killed
    workers = {r["name"]: r for r in rows if r["name"] in pids}
    assert {name: r["pid"] for name, r in workers.items()} == pids
    labelled = {name: int(r["worker"]) for name, r in workers.items() if name != "sub"}
    assert labelled == {name: pid for name, pid in pids.items() if name != "sub"}  # labels kept
    # Stacks are told apart across processes (a forked child's thread has its parent's ident).
    by_stack: dict[int, set[int]] = {}
    for r in rows:
        by_stack.setdefault(r["stack_id"], set()).add(r["pid"])
    assert all(len(p) == 1 for p in by_stack.values())


def test_a_directory_that_cannot_take_files_keeps_the_scopes_in_memory(tmp_path: Path) -> None:
    # The variable names a regular file: no events file can be made there. The command's
    # scopes still work (its log stays in memory, as with no recorder), and nothing is written.
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    code = """
        import stroboscope
        import stroboscope._core as core
        for _ in range(3):
            with stroboscope.annotate("step"):
                pass
        print(core.events_shared_path(), core.events_stats()["written"])
    """
    proc = start(code, not_a_dir, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split() == ["None", "6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
