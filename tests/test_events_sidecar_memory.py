"""Memory while a spool's events sidecar is read: recovering the rows never reads the events
(they are read when asked for), and the reader holds one chunk at a time, never the file.
Peak allocations are measured with tracemalloc against the sidecar's size."""

from __future__ import annotations

import os
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from stroboscope.formats import events_file
from stroboscope.formats.spool_read import recover_parts
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover

MiB = 1 << 20
CHUNKS = 16  # of MAX_CHUNK_EVENTS events each: 1M events, 36 MiB


def _events_chunk(first: int, count: int) -> bytes:
    rec = np.zeros(count, events_file.RECORD)
    rec["mono_ns"] = np.arange(first, first + count)
    rec["kind"] = 1
    payload = events_file._EVTS.pack(first, 0, count) + rec.tobytes()
    return events_file.HEAD.pack(b"EVTS", len(payload), zlib.crc32(payload)) + payload


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _spool(tmp_path: Path) -> Path:
    spool = tmp_path / "m.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, segment_seconds=0.2, capacity=1024)
    with s:
        deadline = time.monotonic() + 60
        while s.stats().rows_written < 3:
            assert time.monotonic() < deadline, "the sampler wrote no rows for 60 s"
            time.sleep(0.01)
    return spool


def test_recovering_the_rows_never_reads_a_large_sidecar(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    side = Path(str(spool) + ".events")
    n = events_file.MAX_CHUNK_EVENTS
    with open(side, "wb") as f:
        f.write(events_file.MAGIC)
        for k in range(CHUNKS):
            f.write(_events_chunk(k * n, n))
    size = side.stat().st_size
    assert size > 36 * MiB
    rows = len(recover(spool))
    assert rows >= 1
    peak = _peak(lambda: recover(spool))
    assert peak < 8 * MiB, (
        f"recover() peaked at {peak / MiB:.1f} MiB for a {size / MiB:.0f} MiB sidecar"
    )
    got = recover_parts(spool)
    assert got.events.num_rows == CHUNKS * n  # read when asked for, and whole
    assert got.events.column("mono_ns").to_pylist()[-3:] == [
        CHUNKS * n - 3,
        CHUNKS * n - 2,
        CHUNKS * n - 1,
    ]


def test_the_reader_holds_one_chunk_never_the_file(tmp_path: Path) -> None:
    side = tmp_path / "big.events"
    head = events_file.MAGIC + _events_chunk(0, 100)
    with open(side, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 64 * MiB)  # 64 MiB of zeros after the chunk (a sparse file)
    got: list[events_file.EventsRead] = []
    peak = _peak(lambda: got.append(events_file.read(str(side), os.getuid())))
    assert got[0].table.num_rows == 100 and got[0].cut_bytes == 64 * MiB
    assert peak < 4 * MiB, f"read() peaked at {peak / MiB:.1f} MiB for a 64 MiB file"
