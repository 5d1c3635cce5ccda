"""The segment writer: survives failed writes (retry with backoff, counted, rows kept in the
spool), never follows a planted temporary file, and lets a dropped sampler go."""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import stroboscope.recording.segments as segments
from stroboscope import Sampler, recover
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.spool_read import read_spool


def _failing_writes(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """Make the next ``failures`` segment writes raise ENOSPC; returns the paths tried."""
    real = segments._write_segment
    tried: list[str] = []

    def write(table: pa.Table, path: str) -> None:
        tried.append(path)
        if len(tried) <= failures:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(table, path)

    monkeypatch.setattr(segments, "_write_segment", write)
    return tried


def _wait_for(predicate: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_full_disk_is_retried_and_every_row_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried = _failing_writes(monkeypatch, 3)
    path = tmp_path / "run.spool"
    # 65536 rows at 10 ms: the ring holds the whole test, so no row can be overwritten.
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=65536, segment_seconds=0.05)
    with caplog.at_level(logging.WARNING, logger="stroboscope.recording"):
        s.start()
        _wait_for(lambda: (st := s.segments) is not None and st.segments_written >= 2, "segments")
        status = s.segments
        assert status is not None and status.errors == 3
        assert status.last_error is not None and "No space left on device" in status.last_error
        s.close()
    final = s.segments
    assert final is not None
    assert final.errors == 3 and final.rows_unwritten == 0 and final.rows_lost == 0
    assert len(tried) == final.segments_written + 3
    assert any("not written" in r.getMessage() for r in caplog.records)  # reported, once
    rows = s.stats().rows_written
    table = recover(path).to_arrow()
    mono = table.column("mono_ns").to_numpy()
    assert table.num_rows == rows and np.all(np.diff(mono) > 0)
    segment_rows = sum(pa.parquet.read_table(p).num_rows for p in segment_paths(path))
    assert segment_rows == rows  # the retries put every row in a segment in the end


def test_a_last_segment_that_cannot_be_written_leaves_its_rows_in_the_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _failing_writes(monkeypatch, 1000)
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(7)
    with caplog.at_level(logging.WARNING, logger="stroboscope.recording"):
        s.close()  # does not raise: the spool keeps the rows
    status = s.segments
    assert status is not None
    assert status.errors == segments.STOP_ATTEMPTS and status.rows_unwritten == 7
    assert status.segments_written == 0 and segment_paths(path) == []
    assert any("7 rows" in r.getMessage() and "recover" in r.getMessage() for r in caplog.records)
    assert len(recover(path)) == 7
    assert sorted(os.listdir(tmp_path)) == ["run.spool"]  # no temporary file left behind


def test_a_planted_symlink_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.chmod(victim, 0o644)
    path = tmp_path / "run.spool"
    for i in (1, 2):
        (tmp_path / f"run.spool.seg-{i:06d}.parquet.tmp").symlink_to(victim)
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(4)
    s.close()
    assert victim.read_bytes() == b"keep"
    assert (os.stat(victim).st_mode & 0o777) == 0o644
    assert len(segment_paths(path)) == 1 and len(recover(path)) == 4


def test_a_dropped_spooled_sampler_releases_its_spool(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(3)
    del s
    gc.collect()
    with pytest.raises(ValueError, match="already exists: recover it"):  # not "in use"
        Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    assert len(recover(path)) == 3


def test_remove_spool_removes_a_dead_writers_temporary_too(tmp_path: Path) -> None:
    from stroboscope.formats.spool_read import remove_spool

    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(2)
    s.close()
    (tmp_path / ".run.spool.seg-000002.parquet.k3j9x_2a.tmp").write_bytes(b"half a segment")
    (tmp_path / "other.txt").write_bytes(b"not ours")
    remove_spool(path)
    assert os.listdir(tmp_path) == ["other.txt"]


def test_rows_overwritten_during_failed_writes_are_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # 300 rows into a 256-row ring: 44 are gone before any segment. Two failed tries and a good
    # one at stop(): the 44 are lost once, not once per try.
    tried = _failing_writes(monkeypatch, 2)
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(300)
    with caplog.at_level(logging.WARNING, logger="stroboscope.recording"):
        s.close()
    status = s.segments
    assert status is not None and len(tried) == 3
    assert status.errors == 2 and status.segments_written == 1
    assert status.rows_lost == 44 and status.rows_unwritten == 0
    segment_rows = sum(pa.parquet.read_table(p).num_rows for p in segment_paths(path))
    assert segment_rows == 256


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_recover_command_streams_one_part_at_a_time(tmp_path: Path, suffix: str) -> None:
    import pyarrow.csv as pacsv
    from stroboscope.cli import main

    # Three segments of 100 rows and 50 rows only in the ring: the command writes them part by
    # part (one Parquet row group each), the same rows recover() returns as one frame.
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    try:
        for _ in range(3):
            s.tick_now(100)
            assert s._segments is not None
            s._segments.flush()
        s.tick_now(50)
        out = tmp_path / f"out{suffix}"
        assert main(["recover", str(path), "-o", str(out)]) == 0
        whole = recover(path).to_arrow()
    finally:
        s.close()
    assert whole.num_rows == 350
    if suffix == ".parquet":
        assert pa.parquet.ParquetFile(out).metadata.num_row_groups == 4
        written = pa.parquet.read_table(out)
        assert written.equals(whole) and written.schema.metadata == whole.schema.metadata
    else:
        written = pacsv.read_csv(out)
        assert written.column("mono_ns").to_pylist() == whole.column("mono_ns").to_pylist()


class _CallingThreads:
    """A file object that notes the thread of every call made on it (pyarrow calls a file
    object's methods from its own pool threads when it reads through one)."""

    def __init__(self, f: Any, threads: set[int]) -> None:
        self._f, self._threads = f, threads

    def __enter__(self) -> _CallingThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        self._threads.add(threading.get_ident())
        attr = getattr(self._f, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._threads.add(threading.get_ident())
            return attr(*args, **kwargs)

        return call


def test_a_segment_is_read_on_the_calling_thread_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read through a Python file object, pyarrow's pool threads call it, and release the bytes
    # it returned, taking the GIL from threads Python never made; with tracemalloc stopped
    # meanwhile (a memory test), CPython 3.11 crashed in such a thread (a segfault with no
    # Python frame, the main thread in the next glob). The segment's bytes are read here.
    path = tmp_path / "run.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(5)
    s.close()
    assert len(segment_paths(path)) == 1
    threads: set[int] = set()
    real = os.fdopen
    # Every file object opened while recovering (the segment's reads, the provenance's).
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: _CallingThreads(real(*a, **k), threads))
    frame = recover(path)
    # pyarrow reads through its own native file (test_arrow_sources.py); a Python file object
    # opened meanwhile is only ever called here.
    assert threads <= {threading.get_ident()}
    # The rows, from the segment, as the spool's ring (mapped, read without pyarrow) has them.
    ring, _ = read_spool(path)
    got = frame.to_arrow()
    assert len(got) == ring.num_rows == 5
    assert got.column("mono_ns").to_pylist() == ring.column("mono_ns").to_pylist()
