"""Spool format versions: version 2 (row blocks) as written today, version 1 (one array per
column, written before the blocks) still recovered, any other version refused by name.

The hand-built spools here follow the layouts as ``spool.hpp`` documents them, independently of
the C++ writer and of the Python reader's code: a reader that got a layout wrong returns other
values than the ones put in.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from stroboscope import Sampler, SpoolError, recover
from stroboscope.formats import spool_layout
from stroboscope.formats.spool_read import read_spool

DATA = Path(__file__).parent / "data" / "spool_v1"
ANCHOR = 1_700_000_000 * 10**9
CREATED = ANCHOR + 5 * 10**9


def _header(
    version: int, capacity: int, schema: bytes, data_size: int, begin: int, head: int
) -> bytes:
    fields = spool_layout.FIELDS if version == 2 else spool_layout.V1_FIELDS
    ncols = schema.count(b"\n")
    header_size = 4096
    values = {
        "magic": b"STROBSPL",
        "version": version,
        "header_size": header_size,
        "capacity": capacity,
        "columns": ncols,
        "schema_size": len(schema),
        "anchor_ns": ANCHOR,
        "interval_ns": 1_000_000,
        "created_ns": CREATED,
        "pid": 4242,
        "block_rows": 64,
        "words": (capacity + 63) // 64,
        "total_size": header_size + data_size,
        "write_begin": begin,
        "head": head,
    }
    out = bytearray(header_size)
    for name, offset, code in fields:
        struct.pack_into("<8s" if code == "s" else "<" + code, out, offset, values[name])
    out[spool_layout.SCHEMA_OFFSET : spool_layout.SCHEMA_OFFSET + len(schema)] = schema
    return bytes(out)


def _schema(ncols: int) -> bytes:
    lines = ["mono_ns\tns\tint64\tgauge"]
    lines += [f"x.c{c}\t1\t{'int64' if c % 2 else 'float64'}\tgauge" for c in range(1, ncols)]
    return ("\n".join(lines) + "\n").encode()


def _value(j: int, c: int) -> int:
    """The cell of row j, column c (column 0 is mono_ns: increasing)."""
    return 1_000_000 * (j + 1) if c == 0 else j * 1000 + c


def _present(j: int, c: int) -> bool:
    return c == 0 or (j * 7 + c) % 5 != 0


def _check(path: Path, ncols: int, first: int, head: int) -> None:
    table, got_first = read_spool(path)
    assert got_first == first and table.num_rows == head - first
    mono = [_value(j, 0) for j in range(first, head)]
    assert table.column("mono_ns").to_pylist() == mono
    assert table.column("time").cast("int64").to_pylist() == [m + ANCHOR for m in mono]
    for c in range(1, ncols):
        col = table.column(f"x.c{c}")
        want = [
            (_value(j, c) if c % 2 else np.uint64(_value(j, c)).view(np.float64).item())
            if _present(j, c)
            else None
            for j in range(first, head)
        ]
        assert col.to_pylist() == want, c


@pytest.mark.parametrize("capacity", [32, 256])
def test_a_hand_built_version_2_spool_reads_back(tmp_path: Path, capacity: int) -> None:
    # 19 columns: groups of 8, 8 and 3; 300 rows into the ring, so it wrapped.
    ncols, head = 19, 300
    blocks = max(1, capacity // 64)
    groups = [(g, min(8, ncols - g)) for g in range(0, ncols, 8)]
    width = ncols * 64 + len(groups) * 8
    ring = np.zeros((blocks, width), np.uint64)
    for j in range(head):
        block, r = (j // 64) % blocks, j % 64
        for g, n in groups:
            base = g // 8 * 520
            for i in range(n):
                c = g + i
                ring[block, base + 64 * i + r] = _value(j, c)
                bit = np.uint64(1) << np.uint64(r)
                word = base + 64 * n + i
                ring[block, word] = (
                    (ring[block, word] | bit) if _present(j, c) else (ring[block, word] & ~bit)
                )
    path = tmp_path / "v2.spool"
    path.write_bytes(_header(2, capacity, _schema(ncols), ring.nbytes, head, head) + ring.tobytes())
    _check(path, ncols, head - capacity, head)


def test_a_hand_built_version_1_spool_reads_back(tmp_path: Path) -> None:
    ncols, capacity, head = 5, 128, 200
    words = capacity // 64
    cells = np.zeros((ncols, capacity), np.uint64)
    validity = np.zeros(ncols * words + 1, np.uint64)
    for j in range(head):
        slot = j % capacity
        for c in range(ncols):
            cells[c, slot] = _value(j, c)
            bit, word = np.uint64(1) << np.uint64(slot % 64), c * words + slot // 64
            validity[word] = (validity[word] | bit) if _present(j, c) else validity[word] & ~bit
    data = cells.tobytes() + validity.tobytes()
    path = tmp_path / "v1.spool"
    path.write_bytes(_header(1, capacity, _schema(ncols), len(data), head, head) + data)
    _check(path, ncols, head - capacity, head)


def test_a_spool_the_previous_version_wrote_is_recovered(tmp_path: Path) -> None:
    # Written by stroboscope before the row blocks (format version 1), with the live sampler's
    # snapshot of the same rows beside it.
    spool = tmp_path / "old.spool"
    spool.write_bytes((DATA / "v1_wrapped.spool").read_bytes())
    assert struct.unpack_from("<I", spool.read_bytes(), 8)[0] == 1
    expected = pq.read_table(DATA / "v1_wrapped.expected.parquet")
    got = recover(spool).to_arrow()
    assert got.num_rows == expected.num_rows == 64
    assert got.column_names == expected.column_names
    for name in expected.column_names:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert got.column("cpu.util_pct").null_count == 60


def test_a_spool_of_another_version_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=64, segment_seconds=0.3)
    s.tick_now(3)
    data = bytearray(path.read_bytes())
    s.close()
    for version in (0, 3, 99):
        struct.pack_into("<I", data, 8, version)
        bad = tmp_path / f"v{version}.spool"
        bad.write_bytes(bytes(data))
        with pytest.raises(SpoolError) as info:
            recover(bad)
        assert str(info.value) == (
            f"{bad} is a spool of format version {version}; this stroboscope reads versions 1 and 2"
        )


def test_version_2_is_written_and_matches_the_live_rows(tmp_path: Path) -> None:
    # The default sources (several column groups, the last one partial) through the C++ writer
    # and the Python reader, against the sampler's own snapshot of the same rows.
    path = tmp_path / "live.spool"
    s = Sampler(0.01, spool=path, capacity=128, segment_seconds=0.5)
    s.tick_now(300)
    table, first = read_spool(path)
    snap = s.snapshot().to_arrow()
    version = struct.unpack_from("<I", path.read_bytes(), 8)[0]
    s.close()
    assert version == spool_layout.VERSION == 2
    assert first == 300 - 128 and table.num_rows == snap.num_rows == 128
    assert snap.num_columns > 17  # at least three groups of columns
    for name in snap.column_names:
        assert table.column(name).to_pylist() == snap.column(name).to_pylist(), name
