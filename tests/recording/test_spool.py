"""The spool: rows in a MAP_SHARED file survive the writer's death; segments; recover()."""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import stroboscope
from stroboscope import Sampler, SpoolError, recover
from stroboscope.formats.segments import segment_paths


def _wait_for(done: Callable[[], bool], seconds: float = 120) -> None:
    """Wait until ``done()`` (the sampler's own counters, never a set time: the cores may be
    busy with other work)."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"not done after {seconds} s"
        time.sleep(0.01)


def test_recover_equals_what_the_sampler_holds(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    s = Sampler(
        0.001,
        sources={"memory": None, "cpu": None, "process": None},
        spool=path,
        segment_seconds=0.2,
        capacity=2048,
    )
    with s:
        _wait_for(lambda: (s.stats().segments_written or 0) >= 2)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    segs = segment_paths(path)
    assert len(segs) >= 2
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in segs)
    table = recover(path).to_arrow()
    snap = s.snapshot().to_arrow()
    assert table.num_rows == s.stats().rows_written == len(snap)
    assert table.column_names == snap.column_names
    for name in snap.column_names:
        assert table.column(name).to_pylist() == snap.column(name).to_pylist(), name
    assert table.schema.field("mem.total_bytes").metadata[b"unit"] == b"bytes"
    assert table.schema.metadata[b"stroboscope.rows_lost"] == b"0"


def test_long_run_rows_exactly_once_across_segments(tmp_path: Path) -> None:
    # 2.5 s at 1 kHz through a 1024-row ring: most rows live only in segments by the end.
    path = tmp_path / "long.spool"
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.3, capacity=1024)
    with s:
        _wait_for(lambda: s.stats().rows_written > 2500 and (s.stats().segments_written or 0) >= 5)
    st = s.stats()
    assert st.rows_written > 2500 and st.rows_overwritten > 400
    assert st.segments_written is not None  # a spooled sampler counts its segments
    assert st.segments_written >= 5 and st.segment_rows_lost == 0
    table = recover(path).to_arrow()
    assert table.num_rows == st.rows_written
    mono = table.column("mono_ns").to_numpy()
    assert np.all(np.diff(mono) > 0)  # in order, no duplicates; with the count above, no gaps
    # The newest rows are the ones the ring still holds.
    ring_rows = s.snapshot().to_arrow().column("mono_ns").to_pylist()
    assert mono[-len(ring_rows) :].tolist() == ring_rows


def test_segments_need_a_ring_that_holds_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="raise capacity or lower segment_seconds"):
        Sampler(
            0.001, sources=["memory"], spool=tmp_path / "x.spool", capacity=1024, segment_seconds=10
        )


def test_spool_directory_must_exist_and_be_owned(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        Sampler(0.01, sources=["memory"], spool=tmp_path / "no" / "x.spool")
    if os.getuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 65534, 65534)
        with pytest.raises(ValueError, match="not owned by you"):
            Sampler(0.01, sources=["memory"], spool=other / "x.spool", segment_seconds=0.5)


def _spool_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "ok.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=64, segment_seconds=0.3)
    s.tick_now(10)
    del s
    return path.read_bytes()


@pytest.mark.parametrize(
    ("mangle", "fragment"),
    [
        (lambda b: b"", "is empty"),
        (lambda b: b[:100], "truncated"),
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b"PARQUET1" + b[8:], "not a stroboscope spool"),
        (lambda b: b[:8] + struct.pack("<I", 7) + b[12:], "format version 7"),
        (lambda b: b[:16] + struct.pack("<Q", 1000) + b[24:], "corrupt header"),
        (lambda b: b[:192] + b"\xff\xfe" + b[194:], "corrupt schema"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path: Path, mangle: object, fragment: str) -> None:
    good = _spool_bytes(tmp_path)
    assert len(recover(tmp_path / "ok.spool")) == 10
    bad = tmp_path / "bad.spool"
    bad.write_bytes(mangle(good))  # type: ignore[operator]
    with pytest.raises(SpoolError, match=fragment):
        recover(bad)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpoolError, match="does not exist"):
        recover(tmp_path / "nothing.spool")


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time, ctypes
    import stroboscope
    how, path = sys.argv[1], sys.argv[2]
    # No overhead budget: every row must hold both sources (a loaded machine may trip one).
    s = stroboscope.Sampler(0.001, sources={"memory": None, "process": None}, spool=path,
                            segment_seconds=0.5, capacity=4096, max_overhead=None).start()
    time.sleep(1.2)
    print("ready", flush=True)
    time.sleep(0.2)
    # What the sampler says it wrote, and its newest row, just before the death.
    print(s.stats().rows_written, s.snapshot().to_arrow().column("mono_ns")[-1].as_py(), flush=True)
    if how == "sigkill":
        time.sleep(60)
    elif how == "exit":
        os._exit(1)
    elif how == "segv":
        ctypes.string_at(0)
    """
)


@pytest.mark.parametrize("how", ["sigkill", "exit", "segv"])
def test_rows_survive_the_death_of_the_writer(tmp_path: Path, how: str) -> None:
    path = tmp_path / "crash.spool"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, how, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    written, newest = (int(v) for v in child.stdout.readline().split())
    if how == "sigkill":
        child.send_signal(signal.SIGKILL)
    code = child.wait(timeout=30)
    died_by = time.monotonic_ns()
    child.stdout.close()
    assert code != 0
    table = recover(path).to_arrow()
    mono = table.column("mono_ns").to_numpy()
    # Every row the sampler reported before the death is recovered, in order, up to the end
    # (bounds from what the sampler itself reported: no wall-clock luck).
    assert written > 0 and table.num_rows >= written
    assert np.all(np.diff(mono) > 0)
    assert newest in set(mono.tolist()) and newest <= int(mono[-1]) <= died_by
    assert table.column("mem.total_bytes").null_count == 0
    assert pa.types.is_timestamp(table.schema.field("time").type)


def test_module_exports() -> None:
    assert stroboscope.recover is recover and issubclass(stroboscope.SpoolError, ValueError)


CRASH_SAFE_CHILD = textwrap.dedent(
    """
    import sys, time
    import stroboscope
    s = stroboscope.Sampler(0.001, sources=["memory"], crash_safe=True, dump_path=sys.argv[1],
                            segment_seconds=0.5, capacity=4096).start()
    time.sleep(1.0)
    print(s.spool, s.stats().rows_written, s.snapshot().to_arrow().column("mono_ns")[-1].as_py(),
          flush=True)
    time.sleep(60)
    """
)


def test_crash_safe_sampler_is_dumped_by_the_watchdog(tmp_path: Path) -> None:
    dump = tmp_path / "dump.csv"
    with subprocess.Popen(
        [sys.executable, "-c", CRASH_SAFE_CHILD, str(dump)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        spool, written_s, newest_s = child.stdout.readline().split()
        written, newest = int(written_s), int(newest_s)
        assert spool and os.path.exists(spool)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        killed_by = time.monotonic_ns()
    deadline = time.monotonic() + 30
    while not dump.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dump.exists()
    assert stat.S_IMODE(os.stat(dump).st_mode) == 0o600
    import csv

    with open(dump, newline="") as f:
        rows = list(csv.DictReader(f))
    # Every row the sampler reported before the kill is in the dump (bounds it reported itself).
    assert written > 0 and len(rows) >= written
    assert newest <= int(rows[-1]["mono_ns"]) <= killed_by
    assert str(newest) in {r["mono_ns"] for r in rows}
    # The private spool (and its directory) is removed once the dump is written.
    deadline = time.monotonic() + 10
    while os.path.exists(os.path.dirname(spool)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(os.path.dirname(spool))


def test_crash_safe_sampler_cleans_up_after_a_normal_stop(tmp_path: Path) -> None:
    dump = tmp_path / "dump.csv"
    s = Sampler(0.001, sources=["memory"], crash_safe=True, dump_path=dump, segment_seconds=0.5)
    with s:
        _wait_for(lambda: s.stats().rows_written > 100)
    spool = s.spool
    assert spool is not None and not os.path.exists(spool)  # private spool removed
    assert len(s.snapshot()) == s.stats().rows_written > 100  # still readable from the mapping
    time.sleep(0.5)
    assert not dump.exists()  # a normal stop writes no dump


def test_an_existing_spool_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(5)
    del s
    with pytest.raises(ValueError, match="already exists: recover it"):
        Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    assert len(recover(path)) == 5  # the first recording is intact


def test_an_existing_file_that_is_no_spool_is_named_as_such(tmp_path: Path) -> None:
    """recover is no advice for a Parquet file or a device given as the spool."""
    data = tmp_path / "run.parquet"
    data.write_bytes(b"PAR1 rows of another run")
    cut = tmp_path / "cut.spool"  # a spool whose first write stopped inside the magic
    cut.write_bytes(b"STROB")
    fifo = tmp_path / "pipe.spool"
    os.mkfifo(fifo)
    for given, words in (
        (data, "exists and is not a spool: a spool is a new file; give another path"),
        (fifo, "exists and is a FIFO: a spool is a new file"),
        (cut, "already exists: recover it"),
    ):
        with pytest.raises(ValueError, match=words):
            Sampler(0.01, sources=["memory"], spool=given, capacity=256, segment_seconds=1)
    assert data.read_bytes() == b"PAR1 rows of another run"


FORK_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import stroboscope
    s = stroboscope.Sampler(0.001, sources=["memory"], crash_safe=True,
                            dump_path=sys.argv[1], segment_seconds=0.5).start()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        try:
            s.start()
            print("child could start the parent's spool ring", flush=True)
        except RuntimeError:
            pass
        sys.exit(0)  # a normal exit: atexit hooks and finalizers run in the child
    os.waitpid(pid, 0)
    print("spool exists after child exit:", os.path.exists(s.spool), flush=True)
    s.close()
    print("spool exists after close:", os.path.exists(s.spool), flush=True)
    print("rows:", len(s.snapshot()), flush=True)
    """
)


def test_a_forked_child_leaves_the_parents_private_spool_alone(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, str(tmp_path / "d.csv")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["spool exists after child exit: True", "spool exists after close: False"]
    assert int(lines[2].split()[1]) > 20
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "d.csv").exists()  # nobody died: no dump
