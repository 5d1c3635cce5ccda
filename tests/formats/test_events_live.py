"""Shared events followed while written (formats/events_live.py): every edge once, in order,
the ones a lapping ring overwrote before a poll counted as lost; the same edges as the reader
of a finished recording."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _shared_events import child_env, run
from stroboscope.formats.events_live import EventsTail
from stroboscope.formats.shared_events import EVENTS_CAPACITY_ENV, read_events_dir

WRITE = """
import time, stroboscope
for i in range(1500):
    with stroboscope.annotate("s"):
        pass
    if i % 10 == 0:
        time.sleep(0.001)
"""


def test_a_lapping_ring_polled_while_written_gives_each_edge_once(tmp_path: Path) -> None:
    env = {**child_env(tmp_path), EVENTS_CAPACITY_ENV: "64"}
    child = subprocess.Popen([sys.executable, "-c", WRITE], env=env)
    tail = EventsTail(str(tmp_path))
    mono, kinds = [], []
    try:
        while child.poll() is None:
            e = tail.poll()
            mono.append(e.mono_ns)
            kinds.append(e.kind)
            time.sleep(0.002)
    finally:
        child.wait(120)
    e = tail.poll()
    mono.append(e.mono_ns)
    kinds.append(e.kind)
    tail.close()
    m, k = np.concatenate(mono), np.concatenate(kinds)
    assert len(m) + tail.lost == 3000  # indices 0..2999: each read once or counted lost
    assert bool(np.all(np.diff(m) >= 0))  # one thread's edges, in order, none twice
    assert set(k.tolist()) <= {1, 2}


def test_the_edges_are_those_the_finished_reader_finds(tmp_path: Path) -> None:
    run(
        "import stroboscope\nfor i in range(50):\n"
        "    with stroboscope.annotate('outer'):\n        with stroboscope.annotate('inner'):\n"
        "            pass",
        tmp_path,
    )
    tail = EventsTail(str(tmp_path))
    e = tail.poll()
    assert len(tail.poll()) == 0  # nothing new
    tail.close()
    ref = read_events_dir(tmp_path)
    assert e.mono_ns.tolist() == ref.column("mono_ns").to_pylist()
    assert e.scope == ref.column("scope").to_pylist()
    assert e.depth.tolist() == ref.column("depth").to_pylist()
    assert e.kind.tolist() == ref.column("kind").to_pylist()
    assert tail.lost == 0
