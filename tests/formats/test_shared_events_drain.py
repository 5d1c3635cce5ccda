"""The shared events drained while their writer runs: a ring of 64 edges and 400 edges written
in bursts, a poll between bursts: every edge reads back once, none lost; the same without the
polls keeps the last 64. The drained file's torn tail, and a file whose header is not written
yet, are waited for, never guessed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _shared_events import run, start
from stroboscope.formats import shared_events_drain
from stroboscope.formats.shared_events import (
    EVENTS_CAPACITY_ENV,
    drained_dir,
    open_dir,
    read_events_dir,
    read_events_file,
)
from stroboscope.formats.shared_events_drain import EventsDrain, FileDrain
from stroboscope.formats.shared_events_records import DRAINED_SUFFIX, read_drained

# 10 bursts of 10 outer calls with an inner one each (40 edges, in a ring of 64); after each
# the writer says so and waits for a line.
BURSTS = """
import sys, stroboscope
for burst in range(10):
    for i in range(10):
        with stroboscope.annotate("outer"):
            with stroboscope.annotate("inner", burst=burst):
                pass
    print(burst, flush=True)
    sys.stdin.readline()
"""


def _write(d: Path, poll: EventsDrain | None) -> None:
    """The writer's 10 bursts (400 edges), ``poll`` drained after each."""
    env = {EVENTS_CAPACITY_ENV: "64"}
    os.environ.update(env)
    try:
        proc = start(BURSTS, d, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    finally:
        del os.environ[EVENTS_CAPACITY_ENV]
    assert proc.stdin is not None and proc.stdout is not None
    with proc, proc.stdin, proc.stdout:
        for burst in range(10):
            assert proc.stdout.readline().strip() == str(burst)
            if poll is not None:
                assert poll.poll() == 40  # the burst's 40 edges
            proc.stdin.write("\n")
            proc.stdin.flush()
        assert proc.wait(timeout=60) == 0


def _keep(d: Path) -> int:
    """The drain's own directory of events directory ``d``, made and opened."""
    os.mkdir(drained_dir(d), 0o700)
    return open_dir(drained_dir(d), private=True)


def _counts(d: Path) -> dict[str, int]:
    table = read_events_dir(d)
    (counts,) = json.loads(table.schema.metadata[b"events_files"])
    return {"rows": table.num_rows, **{k: counts[k] for k in ("lost", "overwritten")}}


def test_a_drained_ring_loses_nothing_a_poll_reached(tmp_path: Path) -> None:
    drained, plain = tmp_path / "drained", tmp_path / "plain"
    drained.mkdir(mode=0o700)
    plain.mkdir(mode=0o700)
    drain = EventsDrain(str(drained))
    _write(drained, drain)
    assert drain.stop() == 400
    assert _counts(drained) == {"rows": 400, "lost": 0, "overwritten": 0}
    table = read_events_dir(drained).to_pydict()
    assert table["scope"].count("inner") == 200
    assert sorted(set(table["labels"])) == [""] + [f'{{"burst":"{b}"}}' for b in range(10)]
    assert table["mono_ns"] == sorted(table["mono_ns"])
    # the same writer, not drained: the ring's last 64 edges, the rest counted overwritten
    _write(plain, None)
    assert _counts(plain) == {"rows": 64, "lost": 336, "overwritten": 336}


def test_the_drained_files_torn_tail_and_an_unwritten_header_are_waited_for(
    tmp_path: Path,
) -> None:
    d = tmp_path / "events"
    d.mkdir(mode=0o700)
    drain = EventsDrain(str(d))
    _write(d, drain)
    drain.stop()
    (events_file,) = [p for p in d.iterdir() if p.suffix == ".sev"]
    kept = Path(drained_dir(d)) / (events_file.name + DRAINED_SUFFIX)
    assert kept.stat().st_size > 0  # the drain's copy, out of the events directory
    with open(kept, "ab") as f:
        f.write(b"\x01\x02\x03")  # a write the drain did not finish
    table, counts = read_events_file(events_file)
    assert table.num_rows == 400 and counts.lost == 0 and counts.damaged == ""
    # a file whose writer has not written its header whole yet: nothing, and asked again
    early = d / "99999.py.sev"
    early.write_bytes(b"STRBSEV")
    waiting = FileDrain(str(early))
    assert waiting.poll() == 0 and not len(waiting.seen)
    waiting.close()


SCOPES = """
import stroboscope
for _ in range(550):
    with stroboscope.annotate("s"):
        pass
"""


def test_a_record_written_while_a_poll_reads_is_read_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 550 calls (1,100 edges) in a ring of 2,048; the first poll reads the states as if the
    # writer were at edge 1,000 then: the next poll takes the rest, each edge once (a drain
    # that moved on from the newest record it saw skipped what was written under its read).
    monkeypatch.setenv(EVENTS_CAPACITY_ENV, "2048")
    run(SCOPES, tmp_path)
    (events_file,) = tmp_path.glob("*.sev")
    real = FileDrain._states
    calls = [0]

    def states(self: FileDrain, slot0: int, n: int) -> Any:
        s = real(self, slot0, n)
        calls[0] += 1
        if calls[0] == 1 and s is not None:
            s = s.copy()
            s[max(0, 1000 - slot0) :] = 0
        return s

    keep = _keep(tmp_path)
    drain = FileDrain(str(events_file), keep_fd=keep)
    monkeypatch.setattr(FileDrain, "_states", states)
    # The writer ended already; the first read stands for one made while it still wrote.
    monkeypatch.setattr(shared_events_drain, "_alive", lambda pid: True)
    assert drain.poll() == 1000
    monkeypatch.setattr(FileDrain, "_states", real)
    assert drain.poll() == 100 and drain.poll() == 0
    drain.close()
    index, _words, why = read_drained(events_file.name, keep) or (np.zeros(0), None, "none")
    os.close(keep)
    assert sorted(index.tolist()) == list(range(1100)) and why == ""


THREADS = """
import threading, stroboscope
s = stroboscope.annotate("t")
def work():
    for _ in range(50_000):
        with s:
            pass
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_four_threads_drained_while_they_write_every_edge_once(tmp_path: Path) -> None:
    # 4 threads x 50,000 calls (400,000 edges, within the default ring), polled in a loop as
    # they write: the drained file alone holds every edge, each once.
    proc = start(THREADS, tmp_path)
    keep = _keep(tmp_path)
    drain = FileDrain("")
    while not drain.path:
        files = list(tmp_path.glob("*.sev"))
        drain = FileDrain(str(files[0]), keep_fd=keep) if files else drain
    while proc.poll() is None:
        drain.poll()
    assert proc.wait() == 0
    drain.poll()
    drain.close()
    index, _words, _why = read_drained(os.path.basename(drain.path), keep) or (np.zeros(0), 0, 0)
    os.close(keep)
    assert len(index) == 400_000 and len(np.unique(index)) == 400_000
