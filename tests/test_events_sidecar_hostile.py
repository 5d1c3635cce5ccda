"""A hostile or large events sidecar costs memory in proportion to the events it holds, never to
the number of its chunks: empty chunks keep nothing, tiny strings are kept compactly, and each
chunk's records are copied out (the chunk is not kept). Peaks are measured with tracemalloc."""

from __future__ import annotations

import os
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
from stroboscope.formats import events_file

MiB = 1 << 20


def _chunk(tag: bytes, payload: bytes) -> bytes:
    return events_file.HEAD.pack(tag, len(payload), zlib.crc32(payload)) + payload


def _strings(first: int, texts: list[bytes]) -> bytes:
    body = b"".join(events_file._LEN.pack(len(t)) + t for t in texts)
    return _chunk(b"STRS", events_file._STRS.pack(first, len(texts)) + body)


def _events(first: int, count: int, scope_id: int) -> bytes:
    rec = np.zeros(count, events_file.RECORD)
    rec["mono_ns"] = np.arange(first, first + count)
    rec["scope_id"] = scope_id
    rec["kind"] = 1
    return _chunk(b"EVTS", events_file._EVTS.pack(first, 0, count) + rec.tobytes())


def _read_peak(path: Path) -> tuple[events_file.EventsRead, int]:
    warm = path.with_suffix(".warm")  # the modules a first read imports are not counted
    warm.write_bytes(events_file.MAGIC + _strings(0, [b"", b"s"]) + _events(0, 2, 1))
    events_file.read(str(warm), os.getuid())
    tracemalloc.start()
    try:
        got = events_file.read(str(path), os.getuid())
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_many_empty_chunks_keep_nothing(tmp_path: Path) -> None:
    side = tmp_path / "empty.events"
    empty_events = _chunk(b"EVTS", events_file._EVTS.pack(0, 0, 0))
    empty_strings = _chunk(b"STRS", events_file._STRS.pack(2, 0))
    with open(side, "wb") as f:
        f.write(events_file.MAGIC + _strings(0, [b"", b"step"]))
        f.write((empty_events + empty_strings) * 100_000)  # 6.4 MB of chunks that hold nothing
        f.write(_events(0, 10, 1) + _events(10, 10, 1))
    got, peak = _read_peak(side)
    assert got.cut_bytes == 0 and got.lost == 0
    assert got.table.column("mono_ns").to_pylist() == list(range(20))
    assert got.table.column("scope").to_pylist() == ["step"] * 20
    # 20 events weigh < 1 KiB: what the reader holds is its buffers, one chunk and the result.
    assert peak < 1 * MiB, f"read() peaked at {peak / MiB:.1f} MiB for 20 events"


def test_tiny_strings_cost_what_they_weigh(tmp_path: Path) -> None:
    side = tmp_path / "strs.events"
    per_chunk, chunks = 50_000, 8  # 400k three-byte strings: 2.8 MB on disk
    texts = [b"%03d" % (i % 1000) for i in range(per_chunk)]
    with open(side, "wb") as f:
        f.write(events_file.MAGIC + _strings(0, [b""]))
        for k in range(chunks):
            f.write(_strings(1 + k * per_chunk, texts))
        f.write(_events(0, 3, chunks * per_chunk))  # names the last string
    got, peak = _read_peak(side)
    assert got.cut_bytes == 0
    assert got.table.column("scope").to_pylist() == [f"{(per_chunk - 1) % 1000:03d}"] * 3
    strings = chunks * per_chunk + 1
    # Kept compactly: its text and an 8-byte offset each, twice over while the Arrow array is
    # made from them, plus one chunk; a Python str each (~50 bytes) would pass 20 MB.
    assert peak < 2 * strings * (3 + 8) + 2 * MiB, f"read() peaked at {peak / MiB:.1f} MiB"


def test_records_are_copied_out_of_their_chunks(tmp_path: Path) -> None:
    side = tmp_path / "small.events"
    n, chunks = 4, 20_000  # 80k events in chunks of 4: 5.4 MB on disk
    with open(side, "wb") as f:
        f.write(events_file.MAGIC + _strings(0, [b"", b"s"]))
        for k in range(chunks):
            f.write(_events(k * n, n, 1))
    got, peak = _read_peak(side)
    assert got.table.num_rows == n * chunks
    assert got.table.column("mono_ns").to_pylist()[-2:] == [n * chunks - 2, n * chunks - 1]
    own = sum(c.nbytes for c in got.table.columns if pa.types.is_integer(c.type))
    # The columns grow by half at a time (1.5x), one column regrown at a time, then the named
    # columns are made: 3x the events' numeric size bounds it. A view kept per chunk (with its
    # chunk) would cost ~200 bytes an event of 36.
    assert peak < 3 * own + 1 * MiB, (
        f"read() peaked at {peak / MiB:.1f} MiB, events {own / MiB:.1f}"
    )
