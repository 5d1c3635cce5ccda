"""A spool followed while it is written (formats/spool_live.py): the rows polled bit for bit
the rows the recovery reader finds, none twice and none skipped; the recorder's lock read
without taking it; a file that is no spool, or another user's, refused in words."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np
import pytest
import stroboscope
from _live_spools import write_spool
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_live import LiveSpool, live_spools
from stroboscope.formats.spool_read import read_spool


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


def test_polls_of_a_running_sampler_give_every_row_once(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    s = stroboscope.Sampler(0.001, sources=["cpu", "memory"], spool=path, capacity=1 << 16)
    polled_mono: list[np.ndarray] = []
    polled_cpu: list[np.ndarray] = []
    firsts: list[tuple[int, int]] = []
    with LiveSpool(str(path)) as live:
        s.start()
        try:
            deadline = time.monotonic() + 60
            while sum(len(m) for m in polled_mono) < 300 and time.monotonic() < deadline:
                rows = live.poll(["cpu.util_pct"])
                polled_mono.append(rows.mono_ns)
                polled_cpu.append(rows.values["cpu.util_pct"])
                firsts.append((rows.first, len(rows.mono_ns)))
                time.sleep(0.02)
        finally:
            s.stop()
        rows = live.poll(["cpu.util_pct"])
        polled_mono.append(rows.mono_ns)
        polled_cpu.append(rows.values["cpu.util_pct"])
        firsts.append((rows.first, len(rows.mono_ns)))
        assert rows.skipped == 0
    s.close()
    # each poll starts where the one before ended
    starts = [f for f, n in firsts if n]
    ends = [f + n for f, n in firsts if n]
    assert starts[1:] == ends[:-1]
    table, first = read_spool(path)  # the reader recover uses: the reference
    assert first == 0 == starts[0]
    mono = np.concatenate(polled_mono)
    assert _same(mono, table.column("mono_ns").to_numpy())
    ref = table.column("cpu.util_pct").to_numpy(zero_copy_only=False).astype(np.float64)
    assert _same(np.concatenate(polled_cpu), ref)
    assert len(mono) >= 300


def test_a_view_slower_than_the_ring_counts_what_it_missed(tmp_path: Path) -> None:
    mono = np.arange(1, 1001, dtype=np.int64) * 1_000_000
    path = write_spool(tmp_path / "s.spool", mono, {"x.v": ("1", mono / 1e6)}, capacity=256)
    with LiveSpool(str(path)) as live:
        live.next_row = 10  # the view read rows up to 10, then the ring went round
        rows = live.poll()
    assert rows.skipped == 1000 - 256 - 10
    assert rows.first == 1000 - 256
    assert _same(rows.values["x.v"], np.arange(745, 1001, dtype=np.float64))


def test_the_lock_is_read_without_taking_it(tmp_path: Path) -> None:
    path = tmp_path / "held.spool"
    s = stroboscope.Sampler(0.01, sources=["memory"], spool=path)
    s.start()
    try:
        with LiveSpool(str(path)) as live:
            state = live.state()
            assert state.recording and state.pid == os.getpid()
            assert (str(path), os.getpid()) in live_spools()
    finally:
        s.close()
    del s  # the sampler's storage (and its lock) goes with the object
    gc.collect()
    with LiveSpool(str(path)) as live:
        gone = live.state()
        assert not gone.recording
        assert "is gone" in gone.gone and "stroboscope recover" in gone.gone
        assert str(path) not in [p for p, _ in live_spools()]
        path.unlink()
        assert "spool was removed" in live.state().gone


def test_a_file_that_is_no_spool_is_refused_in_words(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello, not a spool\n")
    with pytest.raises(SpoolError, match="is not a stroboscope spool"):
        LiveSpool(str(other))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_spool_is_refused_in_words(tmp_path: Path) -> None:
    mono = np.arange(1, 65, dtype=np.int64) * 1_000_000
    path = write_spool(tmp_path / "theirs.spool", mono, {"x.v": ("1", mono / 1e6)})
    os.chown(path, 65534, 65534)
    with pytest.raises(SpoolError, match=r"written by another user \(owner uid 65534"):
        LiveSpool(str(path))


def test_the_hand_built_spool_reads_back_with_the_recovery_reader(tmp_path: Path) -> None:
    # the tests' spool builder against the package's reader (both follow spool.hpp)
    mono = np.arange(1, 301, dtype=np.int64) * 1_000_000
    v = np.where(np.arange(300) % 7 == 0, np.nan, np.arange(300.0))
    path = write_spool(tmp_path / "b.spool", mono, {"x.a": ("%", v), "x.b": ("1", -v)})
    table, first = read_spool(path)
    assert first == 0
    assert _same(table.column("x.a").to_numpy(zero_copy_only=False).astype(float), v)
    assert _same(table.column("x.b").to_numpy(zero_copy_only=False).astype(float), -v)
