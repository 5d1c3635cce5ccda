"""One damaged, truncated, planted or foreign segment file never stops the other rows of a spool:
it is left out, named with why in ``Recovered.skipped``, the metadata and a warning, and the rows
it alone held are counted as lost."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope import Sampler, SpoolError, recover
from stroboscope.formats import pieces as open_owned_files
from stroboscope.formats.segments import segment_paths
from stroboscope.formats.spool_read import SKIPPED_KEY, read_spool, recover_parts


@pytest.fixture(scope="module")
def spool_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spool of a live run whose ring (64 rows) no longer holds its first segments' rows."""
    directory = tmp_path_factory.mktemp("bad_segments")
    path = directory / "r.spool"
    s = Sampler(0.005, sources=["memory"], spool=path, capacity=64, segment_seconds=0.05)
    s.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if len(segment_paths(path)) >= 4 and read_spool(path)[1] > 100:
            break
        time.sleep(0.05)
    s.close()
    assert len(segment_paths(path)) >= 4 and read_spool(path)[1] > 100
    return directory


@pytest.fixture
def spool(spool_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(spool_dir, copy)
    return copy / "r.spool"


def _mono(table: pa.Table) -> set[int]:
    return set(table.column("mono_ns").to_pylist())


def _truncate(seg: Path) -> None:
    os.truncate(seg, seg.stat().st_size // 2)


def _flip(seg: Path) -> None:
    raw = bytearray(seg.read_bytes())
    at = len(raw) // 3
    raw[at : at + 64] = bytes(b ^ 0xFF for b in raw[at : at + 64])
    seg.write_bytes(bytes(raw))


def _foreign(seg: Path) -> None:
    """A segment of another recording (its own clock anchor) put in place of this one."""
    t = pq.read_table(seg)
    time_ns = pa.compute.add(t.column("time").cast(pa.int64()), 12345).cast(t.schema.field(0).type)
    pq.write_table(t.set_column(0, t.schema.field(0), time_ns), seg)


DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    ("truncated", _truncate, "cannot be read as Parquet"),
    ("byte-flipped", _flip, ""),
    ("another run's", _foreign, "clock anchor"),
]


@pytest.mark.parametrize(
    ("damage", "fragment"), [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE]
)
def test_a_damaged_segment_loses_only_its_own_rows(
    spool: Path, damage: Callable[[Path], None], fragment: str, caplog: pytest.LogCaptureFixture
) -> None:
    whole = recover(spool).to_arrow()
    assert recover_parts(spool).skipped == []
    seg = segment_paths(spool)[1]  # a middle one: the next segments are intact
    only_there = _mono(pq.read_table(seg)) - _mono(read_spool(spool)[0])
    assert only_there  # the ring no longer holds them
    damage(seg)
    with caplog.at_level(logging.WARNING, "stroboscope.recording"):
        got = recover_parts(spool)
        table = pa.Table.from_batches([b for part in got.parts for b in part.to_batches()])
    assert _mono(table) == _mono(whole) - only_there
    assert got.rows == table.num_rows
    assert got.rows_lost == int(whole.schema.metadata[b"stroboscope.rows_lost"]) + len(only_there)
    (why,) = got.skipped
    assert str(seg) in why and fragment in why
    assert got.schema.metadata[SKIPPED_KEY.encode()].decode() == why
    assert str(seg) in caplog.text


def test_planted_files_of_any_name_or_owner_are_left_out(
    spool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = recover(spool).to_arrow()
    planted = spool.with_name("r.spool.seg-000099.parquet")
    shutil.copy(segment_paths(spool)[0], planted)
    tiny = spool.with_name("r.spool.seg-99999999999999999999.parquet")
    tiny.write_bytes(b"x")
    real_open = open_owned_files.open_regular  # type: ignore[attr-defined]

    def owned_by_nobody(path: str, what: str, *, follow: bool = True) -> tuple[int, os.stat_result]:
        fd, st = real_open(path, what, follow=follow)
        if path == str(planted):  # as another user's file would be (the tests run as anyone)
            fields = list(st)
            fields[4] = 65534
            st = os.stat_result(fields)
        return fd, st

    monkeypatch.setattr(open_owned_files, "open_regular", owned_by_nobody)
    got = recover(spool).to_arrow()
    assert got.equals(whole.replace_schema_metadata(got.schema.metadata))
    skipped = got.schema.metadata[SKIPPED_KEY.encode()].decode()
    assert f"segment {tiny} cannot be read as Parquet" in skipped
    assert f"segment {planted} is owned by uid 65534" in skipped


def test_the_recover_command_writes_every_other_row(spool: Path, tmp_path: Path) -> None:
    rows = recover(spool).to_arrow().num_rows
    spool.with_name("r.spool.seg-000099.parquet").write_bytes(b"x")
    out = tmp_path / "x.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "stroboscope", "recover", str(spool), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).num_rows == rows
    assert "seg-000099.parquet" in done.stdout + done.stderr


def test_a_damaged_spool_header_still_gives_its_segments_rows(spool: Path) -> None:
    in_segments = set().union(*(_mono(pq.read_table(seg)) for seg in segment_paths(spool)))
    with open(spool, "r+b") as f:
        f.write(b"XXXXXXXX")  # the magic: the header, and so the ring, cannot be read
    got = recover(spool).to_arrow()
    assert _mono(got) == in_segments and got.num_rows == len(in_segments)
    why = got.schema.metadata[SKIPPED_KEY.encode()].decode()
    assert f"{spool} is not a stroboscope spool" in why and "how many is unknown" in why


def test_a_damaged_spool_header_without_a_readable_segment_is_refused(spool: Path) -> None:
    with open(spool, "r+b") as f:
        f.write(b"XXXXXXXX")
    for seg in segment_paths(spool):
        seg.write_bytes(b"x")
    with pytest.raises(SpoolError, match="no segment beside it can be read") as info:
        recover(spool)
    assert f"{spool} is not a stroboscope spool" in str(info.value)
