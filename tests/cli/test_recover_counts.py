"""``stroboscope recover`` says every row: those written, those lost with their causes, the
files left out and the damage read around (a pieces index missing)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.pieces import index_path, read_index
from stroboscope.formats.spool_header import FIELDS
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler


def _recorded(path: Path) -> int:
    """A stopped recording of a few pieces; the rows it wrote (the spool's head counter)."""
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.05, capacity=512)
    _finish.prepare(s)
    try:
        with s:
            deadline = time.monotonic() + 60
            while s.stats().rows_written < 1200 or len(read_index(path, os.geteuid())[0]) < 4:
                assert time.monotonic() < deadline, "the sampler wrote too few pieces"
                time.sleep(0.02)
    finally:
        s.close()
    with open(path, "rb") as f:
        f.seek(FIELDS["head"][0])
        return int.from_bytes(f.read(8), "little")


def test_recover_says_the_rows_lost_by_cause_and_the_damage_read_around(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "r.spool"
    head = _recorded(spool)
    Path(index_path(spool)).unlink()  # read around: the pieces file is read itself
    os.truncate(spool, 8192)  # the ring lost: the rows only it held are counted
    out = tmp_path / "out.parquet"
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    rows = pq.read_metadata(out).num_rows
    lost = head - rows
    assert lost > 0 and f"recovered {rows} rows from {spool}" in text
    assert f"{lost} rows were lost ({lost} held only by the ring of the damaged spool)" in text
    assert f"left out: {spool} is truncated" in text and f"by the {head} its header" in text
    assert f"note: {index_path(spool)} is missing: " in text and "found by reading" in text
    meta = pq.read_schema(out).metadata
    assert int(meta[b"stroboscope.rows_lost"]) == lost
    assert meta[b"stroboscope.rows_lost_to"].decode().startswith(f"{lost} held only by the ring")


@pytest.mark.parametrize("damage", ["magic", "cut to 100 bytes"])
def test_rows_lost_that_cannot_be_counted_are_stored_and_shown_as_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    spool = tmp_path / "r.spool"
    _recorded(spool)
    if damage == "magic":
        with open(spool, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
    else:
        os.truncate(spool, 100)
    out = tmp_path / "out.parquet"
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "how many is unknown" in text, text
    meta = pq.read_schema(out).metadata
    assert b"stroboscope.rows_lost" not in meta  # never a 0 that no one counted
    assert meta[b"stroboscope.rows_lost_unknown"] == b"true"
    assert main(["info", str(out)]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^rows lost: +unknown$", shown, re.M), shown
