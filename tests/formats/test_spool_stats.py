"""The recorder's figures in the spool header (formats/spool_stats.py): written, read back
whole, refused mid-publication, absent from a spool that never had them, and no obstacle to
``recover`` reading the spool."""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

import numpy as np
import stroboscope
from _live_spools import write_spool
from stroboscope.formats import spool_layout
from stroboscope.formats.spool_stats import StatsPublisher, read_recorder_stats
from stroboscope.recording.spool import recover

STATS = {
    "ticks_taken": 1234,
    "ticks_missed": 56,
    "cost_mean_ns": 10_300.4,
    "cost_p99_ns": 48_000,
    "thread_cpu_ns": 26_000_000,
    "rows_written": 999,  # not published: the header's head counts them
}


def _spool(tmp_path: Path) -> Path:
    mono = 10**12 + np.arange(300, dtype=np.int64) * 1_000_000
    path: Path = write_spool(tmp_path / "r.spool", mono, {"cpu.util_pct": ("%", np.full(300, 5.0))})
    return path


def _header(path: Path) -> bytes:
    return path.read_bytes()[: spool_layout.SCHEMA_OFFSET]


def test_published_figures_read_back_and_recover_still_reads_the_spool(tmp_path: Path) -> None:
    path = _spool(tmp_path)
    assert read_recorder_stats(_header(path)) is None  # never published: zeros
    before = recover(path).to_arrow()
    out = StatsPublisher(str(path))
    out.publish(STATS, rows_lost=77)
    got = read_recorder_stats(_header(path))
    assert got is not None and got.seq == 1
    assert (got.ticks_taken, got.ticks_missed, got.ticks_scheduled) == (1234, 56, 1290)
    assert (got.rows_lost, got.cost_mean_ns, got.cost_p99_ns) == (77, 10_300, 48_000)
    assert got.thread_cpu_ns == 26_000_000
    out.publish({**STATS, "ticks_taken": 2000}, rows_lost=80)
    out.close()
    # read through a shared mapping, as the live view does
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        again = read_recorder_stats(m)
    assert again is not None and (again.seq, again.ticks_taken, again.rows_lost) == (2, 2000, 80)
    # the header's checks ignore the block: recover reads the same rows as before
    assert recover(path).to_arrow().equals(before)


def test_a_publication_in_progress_is_not_read(tmp_path: Path) -> None:
    path = _spool(tmp_path)
    out = StatsPublisher(str(path))
    out.publish(STATS, rows_lost=1)
    out.close()
    raw = bytearray(_header(path))
    seq_at = dict((n, o) for n, o, _ in spool_layout.STATS_FIELDS)["stats_seq"]
    struct.pack_into("<Q", raw, seq_at, 3)  # odd: the writer is between its stores
    assert read_recorder_stats(bytes(raw)) is None


def test_the_block_lies_in_bytes_the_core_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "core.spool"
    s = stroboscope.Sampler(0.001, spool=str(path))
    try:
        s.start()
        while s.stats().rows_written < 20:
            time.sleep(0.01)
        with open(path, "rb") as f:
            head = f.read(spool_layout.SCHEMA_OFFSET)
    finally:
        s.close()
        os.unlink(path)
    first = min(o for _, o, _ in spool_layout.STATS_FIELDS)
    last = max(o for _, o, _ in spool_layout.STATS_FIELDS) + 8
    assert head[first:last] == bytes(last - first)  # zeros: the core leaves them alone
    taken = {o for _, o, _ in spool_layout.FIELDS}
    assert not taken & set(range(first, last))  # and no header field of the core is there
