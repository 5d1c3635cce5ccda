"""recover() on spools and segments that are corrupt or lie: a SpoolError naming the file and the
field, never wrong rows, never another exception, never a hang."""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from stroboscope import Sampler, SpoolError, recover
from stroboscope.formats import spool_layout
from stroboscope.formats.segments import FIRST_ROW_KEY, segment_paths
from stroboscope.formats.spool_read import recover_parts

OFFSET = {name: (offset, code) for name, offset, code in spool_layout.FIELDS}


def _make_spool(directory: Path, rows: int = 10) -> tuple[Path, bytes]:
    """A spool of ``rows`` rows whose segment holds them all (written at close)."""
    path = directory / "ok.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=64, segment_seconds=0.3)
    s.tick_now(rows)
    s.close()
    return path, path.read_bytes()


def _put(name: str, value: int) -> Callable[[bytes], bytes]:
    offset, code = OFFSET[name]
    size = struct.calcsize("<" + code)
    return lambda b: b[:offset] + struct.pack("<" + code, value) + b[offset + size :]


def _both(f: Callable[[bytes], bytes], g: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    return lambda b: g(f(b))


SPOOL_CASES: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("head 2^63", _both(_put("write_begin", 2**63), _put("head", 2**63)), "field head"),
    # Counters within bounds but past the rows written: the slots hold no row.
    ("head past the rows", _both(_put("write_begin", 70), _put("head", 70)), "field head"),
    ("counters apart", _put("write_begin", 12), "write_begin"),
    ("capacity not a power of two", _put("capacity", 100), "field capacity"),
    ("capacity 2^63", _put("capacity", 2**63), "field capacity"),
    (
        "capacity past the file",
        _both(_put("capacity", 2**20), _put("total_size", 0)),
        "field total_size",
    ),
    ("block rows", _put("block_rows", 7), r"field block_rows = 7 \(this layout has 64\)"),
    ("columns 0", _put("columns", 0), "field columns"),
    ("header size", _put("header_size", 4000), "field header_size"),
    ("schema size past the header", _put("schema_size", 5000), "field header_size"),
    ("total size", _put("total_size", 123), "field total_size"),
    ("interval 0", _put("interval_ns", 0), "field interval_ns"),
    ("created 0", _put("created_ns", 0), "field created_ns"),
    ("anchor 2^63-1", _put("anchor_ns", 2**63 - 1), "field anchor_ns"),
    ("anchor -2^63", _put("anchor_ns", -(2**63)), "field anchor_ns"),
    ("anchor -1 (booted before 1970)", _put("anchor_ns", -1), "field anchor_ns"),
    ("anchor 0", _put("anchor_ns", 0), "field anchor_ns"),
    ("unknown dtype", lambda b: b.replace(b"\tfloat64\t", b"\tfloat99\t", 1), "dtype 'float99'"),
    ("unknown kind", lambda b: b.replace(b"\tgauge\n", b"\tgauje\n", 1), "kind 'gauje'"),
    ("schema not UTF-8", lambda b: b[:192] + b"\xff\xfe" + b[194:], "corrupt schema"),
    ("version", _put("version", 7), "format version 7; this stroboscope reads versions 1 and 2"),
    ("magic", lambda b: b"PARQUET1" + b[8:], "not a stroboscope spool"),
    ("truncated", lambda b: b[: len(b) // 2], "truncated"),
    ("empty", lambda b: b"", "is empty"),
]


@pytest.mark.parametrize(
    ("mangle", "fragment"), [c[1:] for c in SPOOL_CASES], ids=[c[0] for c in SPOOL_CASES]
)
def test_corrupt_spool_headers_are_refused(
    tmp_path: Path, mangle: Callable[[bytes], bytes], fragment: str
) -> None:
    _, good = _make_spool(tmp_path)
    bad = tmp_path / "bad.spool"
    bad.write_bytes(mangle(good))
    with pytest.raises(SpoolError, match=fragment) as info:
        recover(bad)
    assert str(bad) in str(info.value)


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    p.symlink_to(p)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [(_fifo, "is a FIFO"), (Path.mkdir, "is a directory"), (_loop, "is a symbolic link loop")],
    ids=["fifo", "directory", "symlink loop"],
)
def test_files_that_are_not_spools_are_refused_without_reading(
    tmp_path: Path, make: Callable[[Path], None], fragment: str
) -> None:
    path = tmp_path / "x.spool"
    make(path)
    with pytest.raises(SpoolError, match=fragment) as info:
        recover(path)  # a FIFO would block an open without O_NONBLOCK
    assert str(path) in str(info.value)


def test_a_device_is_not_a_spool() -> None:
    with pytest.raises(SpoolError, match="character device") as info:
        recover(os.devnull)
    assert os.devnull in str(info.value)


def _rewrite_segment(seg: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    table = change(pq.read_table(seg))
    seg.unlink()
    pq.write_table(table, seg)


def _first_row(value: bytes) -> Callable[[pa.Table], pa.Table]:
    def change(t: pa.Table) -> pa.Table:
        meta = dict(t.schema.metadata or {})
        meta[FIRST_ROW_KEY] = value
        return t.replace_schema_metadata(meta)

    return change


def _reverse(t: pa.Table) -> pa.Table:
    return t.take(pa.array(range(t.num_rows - 1, -1, -1)))


def _as_float(t: pa.Table) -> pa.Table:
    i = t.schema.get_field_index("mem.total_bytes")
    col = pc.cast(t.column(i), pa.float64())
    return t.set_column(i, pa.field("mem.total_bytes", pa.float64()), col)


def _drop_metadata(t: pa.Table) -> pa.Table:
    return t.replace_schema_metadata(None)


SEGMENT_CASES: list[tuple[str, Callable[[pa.Table], pa.Table], str]] = [
    ("first_row 1e30", _first_row(b"1e30"), "stroboscope.first_row = '1e30', not a row index"),
    ("first_row 10^30", _first_row(b"1" + b"0" * 30), "stroboscope.first_row = '1000"),
    ("first_row negative", _first_row(b"-5"), "stroboscope.first_row = '-5'"),
    ("first_row past head", _first_row(b"5"), "stroboscope.first_row = 5 with 10 rows"),
    ("no first_row", _drop_metadata, "no stroboscope.first_row"),
    ("another schema", _as_float, "another schema than its spool: column mem.total_bytes"),
    ("rows out of order", _reverse, "out of order"),
]


def _left_out(path: Path, seg: Path, fragment: str) -> None:
    """The bad segment is left out, named with why; the ring's rows are all still recovered."""
    got = recover_parts(path)
    (why,) = got.skipped
    assert str(seg) in why and re.search(fragment, why), why
    assert sum(part.num_rows for part in got.parts) == 10 and got.rows_lost == 0


@pytest.mark.parametrize(
    ("change", "fragment"), [c[1:] for c in SEGMENT_CASES], ids=[c[0] for c in SEGMENT_CASES]
)
def test_corrupt_segments_are_left_out(
    tmp_path: Path, change: Callable[[pa.Table], pa.Table], fragment: str
) -> None:
    path, _ = _make_spool(tmp_path)
    (seg,) = segment_paths(path)
    assert len(recover(path)) == 10
    _rewrite_segment(seg, change)
    _left_out(path, seg, fragment)


def _garbage(p: Path) -> None:
    p.write_bytes(b"not parquet at all")


def _symlink_to_a_good_segment(p: Path) -> None:
    real = p.with_name("elsewhere.parquet")
    os.rename(p, real)
    p.symlink_to(real)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (Path.mkdir, "is a directory"),
        (_fifo, "is a FIFO"),
        (_garbage, "cannot be read as Parquet"),
        (_symlink_to_a_good_segment, "symbolic link"),
    ],
    ids=["directory", "fifo", "garbage", "symlink"],
)
def test_segment_files_of_the_wrong_kind_are_left_out(
    tmp_path: Path, make: Callable[[Path], None], fragment: str
) -> None:
    path, _ = _make_spool(tmp_path)
    (seg,) = segment_paths(path)
    if make is not _symlink_to_a_good_segment:
        seg.unlink()
    make(seg)
    _left_out(path, seg, fragment)


def test_a_segment_of_another_owner_is_left_out(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another user")
    path, _ = _make_spool(tmp_path)
    (seg,) = segment_paths(path)
    os.chown(seg, 65534, 65534)
    _left_out(path, seg, "owned by uid 65534")


def test_a_good_spool_still_recovers(tmp_path: Path) -> None:
    path, _ = _make_spool(tmp_path, rows=40)
    frame = recover(path)
    assert len(frame) == 40 and frame.rows_lost == 0
    assert frame.to_arrow().column("mono_ns").null_count == 0


BIG_FILE_CHILD = """
import resource, sys
from stroboscope import SpoolError, recover
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    recover(sys.argv[1])
except SpoolError as exc:
    print(exc)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_a_huge_file_is_refused_by_its_header_without_being_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    big = tmp_path / "big.spool"
    with open(big, "wb") as f:
        f.write(b"NOTASPOOL")
        f.truncate(4 << 30)  # 4 GiB, sparse
    out = subprocess.run(
        [sys.executable, "-c", BIG_FILE_CHILD, str(big)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    message, grown_kib = out.stdout.splitlines()
    assert "not a stroboscope spool" in message and str(big) in message
    assert int(grown_kib) < 64 * 1024  # not read into memory (it would be 4 GiB)


def test_a_ring_that_wrapped_reads_back_the_rows_it_holds(tmp_path: Path) -> None:
    from stroboscope.formats.spool_read import read_spool

    path = tmp_path / "wrap.spool"
    s = Sampler(0.01, sources=["memory", "cpu"], spool=path, capacity=64, segment_seconds=0.3)
    s.tick_now(100)  # 36 rows overwritten: slots 36..63 then 0..35 hold rows 36..99
    table, first = read_spool(path)
    snap = s.snapshot().to_arrow()
    s.close()
    assert first == 36 and table.num_rows == 64
    for name in snap.column_names:
        assert table.column(name).to_pylist() == snap.column(name).to_pylist(), name
    assert table.column("cpu.util_pct").null_count == snap.column("cpu.util_pct").null_count
